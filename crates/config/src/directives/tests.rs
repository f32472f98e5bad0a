use super::*;
use std::path::{Path, PathBuf};

use crate::testutil::*;
use crate::*;

#[test]
fn defaults_come_from_the_table() {
    let c = Config::default();
    assert_eq!(c.port, 6379);
    assert_eq!(c.bind, vec!["*".to_string(), "-::*".to_string()]);
    assert_eq!(c.unixsocket, None);
    assert_eq!(c.unixsocketperm, 0);
    assert_eq!(c.shards, 0);
    assert_eq!(c.databases, 16);
    assert_eq!(c.maxclients, 10_000);
    assert_eq!(c.timeout_s, 0);
    assert_eq!(c.tcp_keepalive_s, 300);
    assert!(c.protected_mode);
    assert_eq!(c.loglevel, LogLevel::Notice);
    assert_eq!(c.logfile, None);
    assert_eq!(c.proto_max_bulk_len, 512 * 1024 * 1024);
    assert_eq!(c.client_query_buffer_limit, 1024 * 1024 * 1024);
    assert_eq!(c.hz, 10);
    assert_eq!(c.requirepass, None);
    assert_eq!(c.maxmemory, 0);
    assert_eq!(c.maxmemory_policy, MaxmemoryPolicy::Noeviction);
    assert_eq!(c.lfu_log_factor, 10);
    assert_eq!(c.lfu_decay_time_min, 1);
    assert_eq!(c.config_file, None);
}

/// Tessera frees big values in the background on every path by default, where Redis 7.0
/// defaults the six directives to `no` (a deliberate difference, as Valkey 8's).
#[test]
fn lazyfree_directives_default_to_yes() {
    let c = Config::default();
    assert!(c.lazyfree_lazy_eviction);
    assert!(c.lazyfree_lazy_expire);
    assert!(c.lazyfree_lazy_server_del);
    assert!(c.lazyfree_lazy_user_del);
    assert!(c.lazyfree_lazy_user_flush);
    assert!(c.replica_lazy_flush);
    let got = crate::config_get(&c, &[b"lazyfree-lazy-*", b"replica-lazy-flush"]);
    assert_eq!(got.len(), 6);
    assert!(got.iter().all(|(_, v)| v == b"yes"), "{got:?}");
}

#[test]
fn table_is_consistent() {
    for (i, d) in DIRECTIVES.iter().enumerate() {
        assert_eq!(d.name, d.name.to_ascii_lowercase());
        assert_eq!(lookup(d.name.as_bytes()), Some(i), "{} is unique", d.name);
        if let Some(a) = d.alias {
            assert_eq!(lookup(a.as_bytes()), Some(i));
        }
        // Every default is a value its own parser accepts and prints back the same way
        // (`dir` prints the working directory its default stands for).
        if d.name == "dir" {
            continue;
        }
        let printed = d.kind.get(&Config::default());
        let mut cfg = Config::default();
        let args = if d.kind.is_multi_arg() {
            split_args(&printed).unwrap()
        } else {
            vec![printed.clone()]
        };
        d.kind.set(&mut cfg, &args).unwrap();
        assert_eq!(cfg, Config::default(), "{}", d.name);
    }
    for (i, l) in LogLevel::ALL.iter().enumerate() {
        assert_eq!(*l as usize, i);
        assert_eq!(l.name(), LogLevel::NAMES[i]);
    }
    for (i, p) in MaxmemoryPolicy::ALL.iter().enumerate() {
        assert_eq!(*p as usize, i);
        assert_eq!(p.name(), MaxmemoryPolicy::NAMES[i]);
    }
}

/// One sample per directive: (name used, value words, CONFIG GET name, CONFIG GET value).
const SAMPLES: &[(&str, &str, &str, &str)] = &[
    ("port", "7000", "port", "7000"),
    ("bind", "10.0.0.1 ::1", "bind", "10.0.0.1 ::1"),
    ("unixsocket", "/tmp/t.sock", "unixsocket", "/tmp/t.sock"),
    ("unixsocketperm", "700", "unixsocketperm", "700"),
    ("shards", "4", "shards", "4"),
    ("threads", "3", "shards", "3"),
    ("databases", "32", "databases", "32"),
    ("daemonize", "yes", "daemonize", "yes"),
    ("maxclients", "50", "maxclients", "50"),
    ("timeout", "30", "timeout", "30"),
    ("tcp-keepalive", "60", "tcp-keepalive", "60"),
    ("shard-consolidation", "no", "shard-consolidation", "no"),
    ("server-cpulist", "0-3,8", "server-cpulist", "0-3,8"),
    ("server_cpulist", "0-7:2", "server-cpulist", "0-7:2"),
    ("protected-mode", "no", "protected-mode", "no"),
    ("loglevel", "warning", "loglevel", "warning"),
    (
        "enable-debug-command",
        "local",
        "enable-debug-command",
        "local",
    ),
    (
        "enable-module-command",
        "yes",
        "enable-module-command",
        "yes",
    ),
    ("logfile", "/var/log/t.log", "logfile", "/var/log/t.log"),
    ("proto-max-bulk-len", "2mb", "proto-max-bulk-len", "2097152"),
    (
        "client-query-buffer-limit",
        "2gb",
        "client-query-buffer-limit",
        "2147483648",
    ),
    ("hz", "100", "hz", "100"),
    ("busy-reply-threshold", "100", "busy-reply-threshold", "100"),
    (
        "notify-keyspace-events",
        "KEA",
        "notify-keyspace-events",
        "AKE",
    ),
    ("requirepass", "s3cret", "requirepass", "s3cret"),
    ("aclfile", "/tmp/users.acl", "aclfile", "/tmp/users.acl"),
    (
        "acl-pubsub-default",
        "ALLCHANNELS",
        "acl-pubsub-default",
        "allchannels",
    ),
    ("acllog-max-len", "5", "acllog-max-len", "5"),
    (
        "tracking-table-max-keys",
        "7",
        "tracking-table-max-keys",
        "7",
    ),
    ("maxmemory", "100m", "maxmemory", "100000000"),
    ("maxmemory-clients", "10%", "maxmemory-clients", "10%"),
    (
        "maxmemory-policy",
        "allkeys-lfu",
        "maxmemory-policy",
        "allkeys-lfu",
    ),
    ("maxmemory-samples", "10", "maxmemory-samples", "10"),
    (
        "maxmemory-eviction-tenacity",
        "50",
        "maxmemory-eviction-tenacity",
        "50",
    ),
    ("lfu-log-factor", "100", "lfu-log-factor", "100"),
    ("lfu-decay-time", "0", "lfu-decay-time", "0"),
    (
        "hash-max-listpack-entries",
        "7",
        "hash-max-listpack-entries",
        "7",
    ),
    (
        "hash-max-listpack-value",
        "9",
        "hash-max-listpack-value",
        "9",
    ),
    (
        "hash-max-ziplist-value",
        "10",
        "hash-max-listpack-value",
        "10",
    ),
    (
        "set-max-intset-entries",
        "11",
        "set-max-intset-entries",
        "11",
    ),
    (
        "set-max-listpack-entries",
        "12",
        "set-max-listpack-entries",
        "12",
    ),
    (
        "set-max-listpack-value",
        "13",
        "set-max-listpack-value",
        "13",
    ),
    (
        "zset-max-listpack-entries",
        "14",
        "zset-max-listpack-entries",
        "14",
    ),
    (
        "zset-max-ziplist-entries",
        "16",
        "zset-max-listpack-entries",
        "16",
    ),
    (
        "zset-max-listpack-value",
        "15",
        "zset-max-listpack-value",
        "15",
    ),
    (
        "list-max-listpack-size",
        "-3",
        "list-max-listpack-size",
        "-3",
    ),
    ("list-compress-depth", "2", "list-compress-depth", "2"),
    (
        "hll-sparse-max-bytes",
        "1kb",
        "hll-sparse-max-bytes",
        "1024",
    ),
    (
        "stream-node-max-bytes",
        "8kb",
        "stream-node-max-bytes",
        "8192",
    ),
    (
        "stream-node-max-entries",
        "7",
        "stream-node-max-entries",
        "7",
    ),
    ("dir", "/tmp", "dir", "/tmp"),
    ("dbfilename", "x.rdb", "dbfilename", "x.rdb"),
    ("save", "10 1 20 2", "save", "10 1 20 2"),
    ("rdbcompression", "no", "rdbcompression", "no"),
    // Redis's order whatever the input's, case folded.
    (
        "shutdown-on-sigint",
        "FORCE now nosave",
        "shutdown-on-sigint",
        "nosave now force",
    ),
    ("shutdown-on-sigterm", "save", "shutdown-on-sigterm", "save"),
    ("key-load-delay", "-7", "key-load-delay", "-7"),
    ("rdbchecksum", "no", "rdbchecksum", "no"),
    (
        "stop-writes-on-bgsave-error",
        "no",
        "stop-writes-on-bgsave-error",
        "no",
    ),
    ("appendonly", "yes", "appendonly", "yes"),
    ("repl-backlog-size", "2mb", "repl-backlog-size", "2097152"),
    ("repl-backlog-ttl", "60", "repl-backlog-ttl", "60"),
    ("repl-diskless-sync", "no", "repl-diskless-sync", "no"),
    (
        "repl-diskless-sync-delay",
        "0",
        "repl-diskless-sync-delay",
        "0",
    ),
    (
        "repl-diskless-sync-max-replicas",
        "2",
        "repl-diskless-sync-max-replicas",
        "2",
    ),
    (
        "repl-ping-replica-period",
        "3",
        "repl-ping-replica-period",
        "3",
    ),
    ("repl-timeout", "30", "repl-timeout", "30"),
    ("min-replicas-to-write", "1", "min-replicas-to-write", "1"),
    ("min-replicas-max-lag", "5", "min-replicas-max-lag", "5"),
    ("appendfilename", "x.aof", "appendfilename", "x.aof"),
    ("appenddirname", "aofs", "appenddirname", "aofs"),
    ("appendfsync", "ALWAYS", "appendfsync", "always"),
    ("aof-load-truncated", "no", "aof-load-truncated", "no"),
    ("aof-use-rdb-preamble", "no", "aof-use-rdb-preamble", "no"),
    (
        "aof-timestamp-enabled",
        "yes",
        "aof-timestamp-enabled",
        "yes",
    ),
    (
        "auto-aof-rewrite-percentage",
        "50",
        "auto-aof-rewrite-percentage",
        "50",
    ),
    (
        "auto-aof-rewrite-min-size",
        "1mb",
        "auto-aof-rewrite-min-size",
        "1048576",
    ),
    (
        "slowlog-log-slower-than",
        "-1",
        "slowlog-log-slower-than",
        "-1",
    ),
    ("slowlog-max-len", "5", "slowlog-max-len", "5"),
    (
        "latency-monitor-threshold",
        "100",
        "latency-monitor-threshold",
        "100",
    ),
    ("latency-tracking", "no", "latency-tracking", "no"),
    (
        "latency-tracking-info-percentiles",
        "50.0 99.990",
        "latency-tracking-info-percentiles",
        "50 99.99",
    ),
    ("replicaof", "10.0.0.9 6380", "replicaof", "10.0.0.9 6380"),
    ("slaveof", "h 1", "replicaof", "h 1"),
    ("masterauth", "pw", "masterauth", "pw"),
    ("masteruser", "u", "masteruser", "u"),
    ("replica-read-only", "no", "replica-read-only", "no"),
    ("slave-read-only", "no", "replica-read-only", "no"),
    (
        "replica-serve-stale-data",
        "no",
        "replica-serve-stale-data",
        "no",
    ),
    (
        "replica-ignore-disk-write-errors",
        "yes",
        "replica-ignore-disk-write-errors",
        "yes",
    ),
    ("replica-priority", "7", "replica-priority", "7"),
    ("replica-announced", "no", "replica-announced", "no"),
    (
        "lazyfree-lazy-eviction",
        "no",
        "lazyfree-lazy-eviction",
        "no",
    ),
    ("lazyfree-lazy-expire", "no", "lazyfree-lazy-expire", "no"),
    (
        "lazyfree-lazy-server-del",
        "no",
        "lazyfree-lazy-server-del",
        "no",
    ),
    (
        "lazyfree-lazy-user-del",
        "no",
        "lazyfree-lazy-user-del",
        "no",
    ),
    (
        "lazyfree-lazy-user-flush",
        "no",
        "lazyfree-lazy-user-flush",
        "no",
    ),
    ("replica-lazy-flush", "no", "replica-lazy-flush", "no"),
    ("slave-lazy-flush", "no", "replica-lazy-flush", "no"),
    (
        "client-output-buffer-limit",
        "replica 1mb 2k 3 NORMAL 4 5 6",
        "client-output-buffer-limit",
        "normal 4 5 6 slave 1048576 2000 3 pubsub 33554432 8388608 60",
    ),
    ("tls-port", "6380", "tls-port", "6380"),
    ("tls-cert-file", "/c.crt", "tls-cert-file", "/c.crt"),
    ("tls-key-file", "/c.key", "tls-key-file", "/c.key"),
    ("tls-key-file-pass", "pw", "tls-key-file-pass", "pw"),
    (
        "tls-client-cert-file",
        "/cc.crt",
        "tls-client-cert-file",
        "/cc.crt",
    ),
    (
        "tls-client-key-file",
        "/cc.key",
        "tls-client-key-file",
        "/cc.key",
    ),
    (
        "tls-client-key-file-pass",
        "cpw",
        "tls-client-key-file-pass",
        "cpw",
    ),
    (
        "tls-dh-params-file",
        "/dh.pem",
        "tls-dh-params-file",
        "/dh.pem",
    ),
    ("tls-ca-cert-file", "/ca.crt", "tls-ca-cert-file", "/ca.crt"),
    ("tls-ca-cert-dir", "/cas", "tls-ca-cert-dir", "/cas"),
    (
        "tls-auth-clients",
        "OPTIONAL",
        "tls-auth-clients",
        "optional",
    ),
    ("tls-protocols", "TLSv1.3", "tls-protocols", "TLSv1.3"),
    ("tls-ciphers", "DEFAULT", "tls-ciphers", "DEFAULT"),
    (
        "tls-ciphersuites",
        "TLS_AES_128_GCM_SHA256",
        "tls-ciphersuites",
        "TLS_AES_128_GCM_SHA256",
    ),
    (
        "tls-prefer-server-ciphers",
        "yes",
        "tls-prefer-server-ciphers",
        "yes",
    ),
    ("tls-session-caching", "no", "tls-session-caching", "no"),
    (
        "tls-session-cache-size",
        "100",
        "tls-session-cache-size",
        "100",
    ),
    (
        "tls-session-cache-timeout",
        "60",
        "tls-session-cache-timeout",
        "60",
    ),
    ("tls-replication", "yes", "tls-replication", "yes"),
    ("tls-cluster", "yes", "tls-cluster", "yes"),
];

fn check_sample(c: &Config, name: &str) {
    match name {
        "port" => assert_eq!(c.port, 7000),
        "bind" => assert_eq!(c.bind, strings(&["10.0.0.1", "::1"])),
        "unixsocket" => assert_eq!(c.unixsocket, Some(PathBuf::from("/tmp/t.sock"))),
        "unixsocketperm" => assert_eq!(c.unixsocketperm, 0o700),
        "shards" => assert_eq!(c.shards, 4),
        "threads" => assert_eq!(c.shards, 3),
        "databases" => assert_eq!(c.databases, 32),
        "maxclients" => assert_eq!(c.maxclients, 50),
        "timeout" => assert_eq!(c.timeout_s, 30),
        "tcp-keepalive" => assert_eq!(c.tcp_keepalive_s, 60),
        "shard-consolidation" => assert!(!c.shard_consolidation),
        "server-cpulist" => assert_eq!(c.server_cpulist, "0-3,8"),
        "server_cpulist" => assert_eq!(c.server_cpulist, "0-7:2"),
        "protected-mode" => assert!(!c.protected_mode),
        "loglevel" => assert_eq!(c.loglevel, LogLevel::Warning),
        "enable-debug-command" => assert_eq!(c.enable_debug_command, ProtectedAction::Local),
        "enable-module-command" => assert_eq!(c.enable_module_command, ProtectedAction::Yes),
        "logfile" => assert_eq!(c.logfile, Some(PathBuf::from("/var/log/t.log"))),
        "proto-max-bulk-len" => assert_eq!(c.proto_max_bulk_len, 2 * 1024 * 1024),
        "client-query-buffer-limit" => assert_eq!(c.client_query_buffer_limit, 2 << 30),
        "hz" => assert_eq!(c.hz, 100),
        "busy-reply-threshold" => assert_eq!(c.busy_reply_threshold_ms, 100),
        "notify-keyspace-events" => assert_eq!(
            c.notify_keyspace_events,
            ds::events::ALL | ds::events::KEYSPACE | ds::events::KEYEVENT
        ),
        "requirepass" => assert_eq!(c.requirepass.as_deref(), Some(&b"s3cret"[..])),
        "aclfile" => assert_eq!(c.aclfile, Some(PathBuf::from("/tmp/users.acl"))),
        "acl-pubsub-default" => assert!(c.acl_pubsub_default_all),
        "acllog-max-len" => assert_eq!(c.acllog_max_len, 5),
        "tracking-table-max-keys" => assert_eq!(c.tracking_table_max_keys, 7),
        "maxmemory" => assert_eq!(c.maxmemory, 100_000_000),
        "maxmemory-clients" => assert_eq!(c.maxmemory_clients, -10),
        "daemonize" => assert!(c.daemonize),
        "key-load-delay" => assert_eq!(c.key_load_delay, -7),
        "maxmemory-policy" => assert_eq!(c.maxmemory_policy, MaxmemoryPolicy::AllkeysLfu),
        "maxmemory-samples" => assert_eq!(c.maxmemory_samples, 10),
        "maxmemory-eviction-tenacity" => assert_eq!(c.maxmemory_eviction_tenacity, 50),
        "lfu-log-factor" => assert_eq!(c.lfu_log_factor, 100),
        "lfu-decay-time" => assert_eq!(c.lfu_decay_time_min, 0),
        "hash-max-listpack-entries" => assert_eq!(c.hash_max_listpack_entries, 7),
        "hash-max-listpack-value" => assert_eq!(c.hash_max_listpack_value, 9),
        "hash-max-ziplist-value" => assert_eq!(c.hash_max_listpack_value, 10),
        "set-max-intset-entries" => assert_eq!(c.set_max_intset_entries, 11),
        "set-max-listpack-entries" => assert_eq!(c.set_max_listpack_entries, 12),
        "set-max-listpack-value" => assert_eq!(c.set_max_listpack_value, 13),
        "zset-max-listpack-entries" => assert_eq!(c.zset_max_listpack_entries, 14),
        "zset-max-ziplist-entries" => assert_eq!(c.zset_max_listpack_entries, 16),
        "zset-max-listpack-value" => assert_eq!(c.zset_max_listpack_value, 15),
        "list-max-listpack-size" => assert_eq!(c.list_max_listpack_size, -3),
        "list-compress-depth" => assert_eq!(c.list_compress_depth, 2),
        "hll-sparse-max-bytes" => assert_eq!(c.hll_sparse_max_bytes, 1024),
        "stream-node-max-bytes" => assert_eq!(c.stream_node_max_bytes, 8192),
        "stream-node-max-entries" => assert_eq!(c.stream_node_max_entries, 7),
        "dir" => assert_eq!(c.dir.as_deref(), Some(Path::new("/tmp"))),
        "dbfilename" => assert_eq!(c.dbfilename, b"x.rdb"),
        "save" => assert_eq!(c.save_rules(), [(10, 1), (20, 2)]),
        "rdbcompression" => assert!(!c.rdbcompression),
        "shutdown-on-sigint" => assert_eq!(
            c.shutdown_on_sigint,
            SHUTDOWN_SIG_NOSAVE | SHUTDOWN_SIG_NOW | SHUTDOWN_SIG_FORCE
        ),
        "shutdown-on-sigterm" => assert_eq!(c.shutdown_on_sigterm, SHUTDOWN_SIG_SAVE),
        "rdbchecksum" => assert!(!c.rdbchecksum),
        "stop-writes-on-bgsave-error" => assert!(!c.stop_writes_on_bgsave_error),
        "appendonly" => assert!(c.appendonly),
        "repl-backlog-size" => assert_eq!(c.repl_backlog_size, 2 << 20),
        "repl-backlog-ttl" => assert_eq!(c.repl_backlog_ttl_s, 60),
        "repl-diskless-sync" => assert!(!c.repl_diskless_sync),
        "repl-diskless-sync-delay" => assert_eq!(c.repl_diskless_sync_delay_s, 0),
        "repl-diskless-sync-max-replicas" => {
            assert_eq!(c.repl_diskless_sync_max_replicas, 2)
        }
        "repl-ping-replica-period" => assert_eq!(c.repl_ping_replica_period_s, 3),
        "repl-timeout" => assert_eq!(c.repl_timeout_s, 30),
        "min-replicas-to-write" => assert_eq!(c.min_replicas_to_write, 1),
        "min-replicas-max-lag" => assert_eq!(c.min_replicas_max_lag_s, 5),
        "appendfilename" => assert_eq!(c.appendfilename, b"x.aof"),
        "appenddirname" => assert_eq!(c.appenddirname, b"aofs"),
        "appendfsync" => assert_eq!(c.appendfsync, AppendFsync::Always),
        "aof-load-truncated" => assert!(!c.aof_load_truncated),
        "aof-use-rdb-preamble" => assert!(!c.aof_use_rdb_preamble),
        "aof-timestamp-enabled" => assert!(c.aof_timestamp_enabled),
        "auto-aof-rewrite-percentage" => assert_eq!(c.auto_aof_rewrite_percentage, 50),
        "auto-aof-rewrite-min-size" => assert_eq!(c.auto_aof_rewrite_min_size, 1 << 20),
        "slowlog-log-slower-than" => assert_eq!(c.slowlog_log_slower_than, -1),
        "slowlog-max-len" => assert_eq!(c.slowlog_max_len, 5),
        "latency-monitor-threshold" => assert_eq!(c.latency_monitor_threshold, 100),
        "latency-tracking" => assert!(!c.latency_tracking),
        "latency-tracking-info-percentiles" => {
            assert_eq!(c.latency_tracking_info_percentiles, [50.0, 99.99])
        }
        "replicaof" => assert_eq!(c.replicaof, strings(&["10.0.0.9", "6380"])),
        "slaveof" => assert_eq!(c.replicaof, strings(&["h", "1"])),
        "masterauth" => assert_eq!(c.masterauth.as_deref(), Some(&b"pw"[..])),
        "masteruser" => assert_eq!(c.masteruser.as_deref(), Some(&b"u"[..])),
        "replica-read-only" | "slave-read-only" => assert!(!c.replica_read_only),
        "replica-serve-stale-data" => assert!(!c.replica_serve_stale_data),
        "replica-ignore-disk-write-errors" => assert!(c.replica_ignore_disk_write_errors),
        "replica-priority" => assert_eq!(c.replica_priority, 7),
        "replica-announced" => assert!(!c.replica_announced),
        "lazyfree-lazy-eviction" => assert!(!c.lazyfree_lazy_eviction),
        "lazyfree-lazy-expire" => assert!(!c.lazyfree_lazy_expire),
        "lazyfree-lazy-server-del" => assert!(!c.lazyfree_lazy_server_del),
        "lazyfree-lazy-user-del" => assert!(!c.lazyfree_lazy_user_del),
        "lazyfree-lazy-user-flush" => assert!(!c.lazyfree_lazy_user_flush),
        "replica-lazy-flush" | "slave-lazy-flush" => assert!(!c.replica_lazy_flush),
        "client-output-buffer-limit" => assert_eq!(
            c.client_output_buffer_limit[ObufClass::Normal as usize],
            ObufLimit {
                hard: 4,
                soft: 5,
                soft_seconds: 6
            }
        ),
        "tls-port" => assert_eq!(c.tls_port, 6380),
        "tls-cert-file" => assert_eq!(c.tls_cert_file, Some(PathBuf::from("/c.crt"))),
        "tls-key-file" => assert_eq!(c.tls_key_file, Some(PathBuf::from("/c.key"))),
        "tls-key-file-pass" => assert_eq!(c.tls_key_file_pass.as_deref(), Some(&b"pw"[..])),
        "tls-client-cert-file" => {
            assert_eq!(c.tls_client_cert_file, Some(PathBuf::from("/cc.crt")))
        }
        "tls-client-key-file" => {
            assert_eq!(c.tls_client_key_file, Some(PathBuf::from("/cc.key")))
        }
        "tls-client-key-file-pass" => {
            assert_eq!(c.tls_client_key_file_pass.as_deref(), Some(&b"cpw"[..]))
        }
        "tls-dh-params-file" => {
            assert_eq!(c.tls_dh_params_file, Some(PathBuf::from("/dh.pem")))
        }
        "tls-ca-cert-file" => assert_eq!(c.tls_ca_cert_file, Some(PathBuf::from("/ca.crt"))),
        "tls-ca-cert-dir" => assert_eq!(c.tls_ca_cert_dir, Some(PathBuf::from("/cas"))),
        "tls-auth-clients" => assert_eq!(c.tls_auth_clients, TlsAuthClients::Optional),
        "tls-protocols" => assert_eq!(c.tls_protocols.as_deref(), Some(&b"TLSv1.3"[..])),
        "tls-ciphers" => assert_eq!(c.tls_ciphers.as_deref(), Some(&b"DEFAULT"[..])),
        "tls-ciphersuites" => assert_eq!(
            c.tls_ciphersuites.as_deref(),
            Some(&b"TLS_AES_128_GCM_SHA256"[..])
        ),
        "tls-prefer-server-ciphers" => assert!(c.tls_prefer_server_ciphers),
        "tls-session-caching" => assert!(!c.tls_session_caching),
        "tls-session-cache-size" => assert_eq!(c.tls_session_cache_size, 100),
        "tls-session-cache-timeout" => assert_eq!(c.tls_session_cache_timeout_s, 60),
        "tls-replication" => assert!(c.tls_replication),
        "tls-cluster" => assert!(c.tls_cluster),
        other => panic!("no check for {other}"),
    }
}

#[test]
fn samples_cover_every_directive() {
    for d in DIRECTIVES {
        assert!(
            SAMPLES.iter().any(|s| s.0 == d.name),
            "no sample for {}",
            d.name
        );
    }
}

#[test]
fn every_directive_from_a_file() {
    for &(name, value, get_name, get_value) in SAMPLES {
        let cfg = file(&format!("# sample\n\n  {name} {value}  \r\n")).unwrap();
        check_sample(&cfg, name);
        assert_eq!(
            get(&cfg, &[get_name]),
            vec![(get_name.into(), get_value.into())]
        );
        // Directive names are case-insensitive.
        let upper = file(&format!("{} {value}", name.to_uppercase())).unwrap();
        assert_eq!(upper, cfg, "{name}");
    }
}

#[test]
fn every_directive_from_the_command_line() {
    for &(name, value, get_name, get_value) in SAMPLES {
        // `--name v1 v2` as separate arguments...
        let mut a = vec![format!("--{name}")];
        a.extend(value.split(' ').map(String::from));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let cfg = cli(&a).unwrap();
        check_sample(&cfg, name);
        assert_eq!(get_one(&cfg, get_name), get_value);
        // ... and as one quoted argument.
        assert_eq!(cli(&[&format!("--{name}"), value]).unwrap(), cfg, "{name}");
        // ... and as `"--name value"` in one argument.
        assert_eq!(cli(&[&format!("--{name} {value}")]).unwrap(), cfg, "{name}");
    }
}

#[test]
fn every_directive_through_config_get_and_set() {
    for &(name, value, get_name, get_value) in SAMPLES {
        let mut cfg = Config::default();
        let d = &DIRECTIVES[lookup(name.as_bytes()).unwrap()];
        let r = set(&mut cfg, &[(name, value)]);
        if d.runtime == Mutable {
            assert_eq!(r, Ok(()));
            check_sample(&cfg, name);
            assert_eq!(get_one(&cfg, get_name), get_value);
        } else {
            let why = if d.runtime == Protected {
                "protected"
            } else {
                "immutable"
            };
            assert_eq!(
                r.unwrap_err(),
                format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - \
                     can't set {why} config"
                )
            );
            assert_eq!(cfg, Config::default());
        }
    }
}

#[test]
fn tls_directives_as_redis() {
    let mut cfg = Config::default();
    // Redis 7.0.15's text.
    assert_eq!(
        set(&mut cfg, &[("tls-auth-clients", "maybe")]).unwrap_err(),
        "ERR CONFIG SET failed (possibly related to argument 'tls-auth-clients') - \
         argument(s) must be one of the following: no, yes, optional"
    );
    assert!(!cfg.tls_wanted());
    let before = cfg.clone();
    assert_eq!(set(&mut cfg, &[("tls-cert-file", "/x.crt")]), Ok(()));
    assert!(cfg.tls_context_differs(&before));
    assert!(!cfg.tls_wanted());
    assert_eq!(set(&mut cfg, &[("tls-replication", "yes")]), Ok(()));
    assert!(cfg.tls_wanted());
    assert_eq!(set(&mut cfg, &[("tls-cert-file", "")]), Ok(()));
    assert_eq!(cfg.tls_cert_file, None);
}

#[test]
fn fixed_directives_accept_only_their_current_value() {
    let mut cfg = Config::default();
    assert_eq!(set(&mut cfg, &[("shards", "0")]), Ok(()));
    assert_eq!(set(&mut cfg, &[("threads", "0")]), Ok(()));
    assert_eq!(
        set(&mut cfg, &[("shards", "2")]).unwrap_err(),
        "ERR CONFIG SET failed (possibly related to argument 'shards') - \
         can't set immutable config"
    );
    assert_eq!(cfg, Config::default());
}

#[test]
fn mutability_matches_the_spec() {
    let immutable: Vec<&str> = DIRECTIVES
        .iter()
        .filter(|d| d.runtime == Immutable)
        .map(|d| d.name)
        .collect();
    let fixed: Vec<&str> = DIRECTIVES
        .iter()
        .filter(|d| d.runtime == Fixed)
        .map(|d| d.name)
        .collect();
    assert_eq!(fixed, ["shards"]);
    assert_eq!(
        immutable,
        [
            "unixsocket",
            "unixsocketperm",
            "server_cpulist",
            "daemonize",
            "databases",
            "enable-debug-command",
            "enable-module-command",
            "logfile",
            "aclfile",
            "rdbchecksum",
            "appendfilename",
            "appenddirname",
            "replicaof"
        ]
    );
}

#[test]
fn maxmemory_clients_takes_bytes_or_a_percentage() {
    let set = |v: &str| {
        let mut c = Config::default();
        crate::config_set(&mut c, &[(b"maxmemory-clients", v.as_bytes())]).map(|()| c)
    };
    assert_eq!(set("1mb").unwrap().maxmemory_clients, 1 << 20);
    assert_eq!(set("100%").unwrap().maxmemory_clients, -100);
    assert_eq!(
        get(&set("5%").unwrap(), &["maxmemory-clients"]),
        [("maxmemory-clients".into(), "5%".into())]
    );
    let err = |v: &str| set(v).err().unwrap();
    assert_eq!(
        err("200%"),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - \
         percentage argument must be less or equal to 100"
    );
    for bad in ["-1", "%", "x%", "-5%", "1x"] {
        assert!(
            err(bad).ends_with("argument must be a memory or percent value"),
            "{bad}"
        );
    }
    // Redis's getClientEvictionLimit: percentages need maxmemory; 128 KiB at least.
    let mut c = set("50%").unwrap();
    assert_eq!(c.client_eviction_limit(), 0);
    c.maxmemory = 10_000_000;
    assert_eq!(c.client_eviction_limit(), 5_000_000);
    c.maxmemory_clients = 1000;
    assert_eq!(c.client_eviction_limit(), 128 * 1024);
}

#[test]
fn hidden_directives_need_their_exact_name() {
    let c = Config::default();
    assert!(get(&c, &["*"]).iter().all(|(n, _)| n != "key-load-delay"));
    assert!(get(&c, &["key-*"]).is_empty());
    assert_eq!(
        get(&c, &["key-load-delay"]),
        [("key-load-delay".into(), "0".into())]
    );
    assert!(!crate::help_text().contains("key-load-delay"));
}

/// `shutdown-on-sigint` / `-sigterm`: Redis 7.0.15's words, errors and order
/// (Tcl unit/introspection's command line and CONFIG REWRITE tests).
#[test]
fn shutdown_on_signal_flags() {
    let mut c = Config::default();
    assert_eq!(get_one(&c, "shutdown-on-sigterm"), "default");
    set(&mut c, &[("shutdown-on-sigterm", "nosave now")]).unwrap();
    assert_eq!(get_one(&c, "shutdown-on-sigterm"), "nosave now");
    set(&mut c, &[("shutdown-on-sigterm", "default")]).unwrap();
    assert_eq!(c.shutdown_on_sigterm, 0);
    let all = "argument(s) must be one of the following: default, save, nosave, now, force";
    for (v, e) in [
        ("", all),
        ("later", all),
        (
            "save nosave",
            "shutdown options SAVE and NOSAVE can't be used simultaneously",
        ),
    ] {
        let err = set(&mut c, &[("shutdown-on-sigint", v)]).unwrap_err();
        assert!(err.ends_with(e), "{v:?}: {err}");
    }
    assert!(cli_err(&["--shutdown-on-sigint"]).contains(all));
    let cfg = cli(&["--shutdown-on-sigint", "nosave", "force", "now"]).unwrap();
    assert_eq!(get_one(&cfg, "shutdown-on-sigint"), "nosave now force");
}
