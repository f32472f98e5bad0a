use super::*;
use crate::testutil::*;
use crate::*;

#[test]
fn config_get_patterns() {
    let cfg = Config::default();
    let all = get(&cfg, &["*"]);
    let names: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    let table: Vec<&str> = DIRECTIVES
        .iter()
        .filter(|d| !d.hidden)
        .flat_map(|d| {
            std::iter::once(d.name).chain(d.alias.filter(|a| !TESSERA_ALIASES.contains(a)))
        })
        .collect();
    assert_eq!(
        names, table,
        "every directive once, in table order, then Redis's alias"
    );
    assert!(names.contains(&"slaveof") && !names.contains(&"threads"));
    // Name and alias both, when both are asked for or matched.
    let both: Vec<String> = get(&cfg, &["replica-read-only", "slave-read-only", "*of"])
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        both,
        [
            "replicaof",
            "slaveof",
            "replica-read-only",
            "slave-read-only"
        ]
    );

    let max: Vec<String> = get(&cfg, &["*max*"]).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        max,
        [
            "maxclients",
            "proto-max-bulk-len",
            "acllog-max-len",
            "tracking-table-max-keys",
            "maxmemory",
            "maxmemory-policy",
            "maxmemory-samples",
            "maxmemory-eviction-tenacity",
            "maxmemory-clients",
            "hash-max-listpack-entries",
            "hash-max-ziplist-entries",
            "hash-max-listpack-value",
            "hash-max-ziplist-value",
            "set-max-intset-entries",
            "set-max-listpack-entries",
            "set-max-listpack-value",
            "zset-max-listpack-entries",
            "zset-max-ziplist-entries",
            "zset-max-listpack-value",
            "zset-max-ziplist-value",
            "list-max-listpack-size",
            "list-max-ziplist-size",
            "hll-sparse-max-bytes",
            "stream-node-max-bytes",
            "stream-node-max-entries",
            "repl-diskless-sync-max-replicas",
            "min-replicas-max-lag",
            "min-slaves-max-lag",
            "slowlog-max-len",
        ]
    );
    assert_eq!(get(&cfg, &["port"]), vec![("port".into(), "6379".into())]);
    // Exact names are echoed as typed (Redis 7.0 replies `PORT` to `CONFIG GET PORT`).
    assert_eq!(get(&cfg, &["PORT"]), vec![("PORT".into(), "6379".into())]);
    // Several patterns: union, each directive once, table order.
    assert_eq!(
        get(&cfg, &["timeout", "port", "por?", "P*", "nosuch"]),
        vec![
            ("port".into(), "6379".into()),
            ("timeout".into(), "0".into()),
            ("protected-mode".into(), "yes".into()),
            ("proto-max-bulk-len".into(), "536870912".into()),
        ]
    );
    // Tessera's own aliases: found by exact name only (Redis's table
    // has no such entry for a glob to list).
    assert_eq!(
        get(&cfg, &["threads"]),
        vec![("threads".into(), "0".into())]
    );
    assert_eq!(get(&cfg, &["thr*"]), vec![]);
    assert_eq!(
        get(&cfg, &["*ards", "*eads"]),
        vec![("shards".into(), "0".into())]
    );
    assert_eq!(get(&cfg, &["shards", "threads", "shards"]).len(), 2);
    assert!(get(&cfg, &["*[", "nosuch", "p\\ort"]).is_empty());
    assert_eq!(get(&cfg, &["p\\ort*"]).len(), 1);
    assert_eq!(get(&cfg, &["[^a-z]*"]), vec![]);
    assert_eq!(
        get(&cfg, &["b[h-j]nd"]),
        vec![("bind".into(), "* -::*".into())]
    );
    assert!(get(&cfg, &[]).is_empty());
    assert_eq!(
        get(&cfg, &["unixsocket*"])[1],
        ("unixsocketperm".into(), "0".into())
    );
    assert_eq!(
        get(&cfg, &["unixsocket"]),
        vec![("unixsocket".into(), String::new())]
    );
}

#[test]
fn glob_is_stringmatchlen_nocase() {
    let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
    assert!(m("*", "port"));
    assert!(m("**", "port"));
    assert!(m("p*t", "port"));
    assert!(m("P?RT", "port"));
    assert!(!m("p?t", "port"));
    assert!(m("[abp]ort", "port"));
    assert!(m("[^a]ort", "port"));
    assert!(!m("[^p]ort", "port"));
    assert!(m("[a-z]ort", "Port"));
    assert!(m("[z-a]ort", "port"), "reversed ranges are swapped");
    assert!(m("[A-Z]ort", "port"));
    assert!(m("\\port", "port"));
    assert!(m("a\\*b", "a*b"));
    assert!(!m("a\\*b", "axb"));
    assert!(m("[\\]]", "]"));
    assert!(m("[\\^]x", "^x"));
    assert!(!m("[", "p"));
    assert!(m("p[o", "po"), "unterminated class ends the pattern");
    assert!(m("*max*", "maxmemory-policy"));
    assert!(!m("*max", "maxmemory-policy"));
    assert!(m("*-*-*", "client-query-buffer-limit"));
    assert!(!m("", "port"));
    assert!(!m("port", ""));
    // Pathological patterns stay cheap (skipLongerMatches).
    let long = "a".repeat(5000);
    assert!(!m(&"*a".repeat(2000).replace("*a*a", "*a*b"), &long));
    assert!(m(&"*".repeat(5000), &long));
}

// ----- CONFIG SET ------------------------------------------------------------------------

#[test]
fn config_set_values() {
    let mut cfg = Config::default();
    assert_eq!(
        set(
            &mut cfg,
            &[
                ("HZ", "1000"),
                ("maxmemory", "1Kb"),
                ("loglevel", "WARNING")
            ]
        ),
        Ok(())
    );
    assert_eq!(
        (cfg.hz, cfg.maxmemory, cfg.loglevel),
        (500, 1024, LogLevel::Warning)
    );
    assert_eq!(set(&mut cfg, &[("hz", "0")]), Ok(()));
    assert_eq!(cfg.hz, 1);
    assert_eq!(set(&mut cfg, &[("maxmemory", "")]), Ok(()));
    assert_eq!(cfg.maxmemory, 0);
    assert_eq!(
        set(&mut cfg, &[("requirepass", "pw"), ("protected-mode", "No")]),
        Ok(())
    );
    assert_eq!(cfg.requirepass.as_deref(), Some(&b"pw"[..]));
    assert_eq!(get_one(&cfg, "requirepass"), "pw");
    assert_eq!(set(&mut cfg, &[("requirepass", "")]), Ok(()));
    assert_eq!(cfg.requirepass, None);
    assert_eq!(
        set(&mut cfg, &[("maxmemory-policy", "ALLKEYS-LRU")]).map(|()| cfg.maxmemory_policy),
        Ok(MaxmemoryPolicy::AllkeysLru)
    );
    assert_eq!(get_one(&cfg, "maxmemory-policy"), "allkeys-lru");
    assert_eq!(set(&mut cfg, &[("proto-max-bulk-len", "2gb")]), Ok(()));
    assert_eq!(get_one(&cfg, "proto-max-bulk-len"), "2147483648");
    assert_eq!(
        set(&mut cfg, &[("maxmemory", "99999999999999999999")]),
        Ok(())
    );
    assert_eq!(get_one(&cfg, "maxmemory"), "18446744073709551615");
}

/// `lfu-log-factor`/`lfu-decay-time`: Redis 7.0 `createIntConfig(.., 0, INT_MAX, ..)`,
/// mutable; replies checked against redis-server 7.0.15.
#[test]
fn lfu_directives_match_redis() {
    let mut cfg = Config::default();
    assert_eq!(
        get(&cfg, &["lfu*"]),
        vec![
            ("lfu-log-factor".into(), "10".into()),
            ("lfu-decay-time".into(), "1".into()),
        ]
    );
    let failed = |name: &str, why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    let range = "argument must be between 0 and 2147483647 inclusive";
    assert_eq!(
        set(&mut cfg, &[("lfu-log-factor", "-1")]),
        Err(failed("lfu-log-factor", range))
    );
    assert_eq!(
        set(&mut cfg, &[("lfu-log-factor", "2147483648")]),
        Err(failed("lfu-log-factor", range))
    );
    assert_eq!(
        set(&mut cfg, &[("lfu-log-factor", "abc")]),
        Err(failed(
            "lfu-log-factor",
            "argument couldn't be parsed into an integer"
        ))
    );
    assert_eq!(
        set(&mut cfg, &[("lfu-decay-time", "-1")]),
        Err(failed("lfu-decay-time", range))
    );
    assert_eq!(cfg, Config::default());
    assert_eq!(
        set(
            &mut cfg,
            &[("lfu-log-factor", "2147483647"), ("LFU-DECAY-TIME", "0")]
        ),
        Ok(())
    );
    assert_eq!(
        (cfg.lfu_log_factor, cfg.lfu_decay_time_min),
        (i32::MAX as u32, 0)
    );
    assert_eq!(get_one(&cfg, "lfu-log-factor"), "2147483647");
    let f = file("lfu-log-factor 3\nlfu-decay-time 60").unwrap();
    assert_eq!((f.lfu_log_factor, f.lfu_decay_time_min), (3, 60));
}

/// Each text was produced by `redis-cli CONFIG SET` against redis-server 7.0.15.
#[test]
fn config_set_errors_are_redis_texts() {
    let failed = |name: &str, why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    let cases: &[(&[(&str, &str)], String)] = &[
        (
            &[("foo", "bar")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'foo'".into(),
        ),
        (
            &[("ZZZ", "1")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'ZZZ'".into(),
        ),
        (
            &[("hz", "x")],
            failed("hz", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("HZ", "x")],
            failed("hz", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("hz", "007")],
            failed("hz", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("hz", "+7")],
            failed("hz", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("hz", " 7")],
            failed("hz", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("hz", "-1")],
            failed("hz", "argument must be between 0 and 2147483647 inclusive"),
        ),
        (
            &[("timeout", "-1")],
            failed(
                "timeout",
                "argument must be between 0 and 2147483647 inclusive",
            ),
        ),
        (
            &[("maxclients", "0")],
            failed(
                "maxclients",
                "argument must be between 1 and 4294967295 inclusive",
            ),
        ),
        (
            &[("protected-mode", "maybe")],
            failed("protected-mode", "argument must be 'yes' or 'no'"),
        ),
        (
            &[("loglevel", "foo")],
            failed(
                "loglevel",
                "argument(s) must be one of the following: \
                 debug, verbose, notice, warning, nothing",
            ),
        ),
        (
            &[("maxmemory-policy", "foo")],
            failed(
                "maxmemory-policy",
                "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
                 volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, \
                 noeviction",
            ),
        ),
        (
            &[("maxmemory", "abc")],
            failed("maxmemory", "argument must be a memory value"),
        ),
        (
            &[("maxmemory", "-1")],
            failed("maxmemory", "argument must be a memory value"),
        ),
        (
            &[("proto-max-bulk-len", "100")],
            failed(
                "proto-max-bulk-len",
                "argument must be between 1048576 and 9223372036854775807 inclusive",
            ),
        ),
        (
            &[("client-query-buffer-limit", "5")],
            failed(
                "client-query-buffer-limit",
                "argument must be between 1048576 and 9223372036854775807 inclusive",
            ),
        ),
        (
            &[("databases", "3")],
            failed("databases", "can't set immutable config"),
        ),
        (
            &[("port", "abc")],
            failed("port", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("Threads", "2")],
            failed("Threads", "can't set immutable config"),
        ),
        (
            &[("hz", "5"), ("hz", "6")],
            failed("hz", "duplicate parameter"),
        ),
        (
            &[("hz", "5"), ("HZ", "6")],
            failed("HZ", "duplicate parameter"),
        ),
        // Lookup errors (unknown, immutable, duplicate) come before value errors; the
        // first of each kind wins.
        (
            &[("hz", "5"), ("foo", "1"), ("databases", "2")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'foo'".into(),
        ),
        (
            &[("databases", "2"), ("foo", "1")],
            failed("databases", "can't set immutable config"),
        ),
        (
            &[("hz", "x"), ("foo", "1")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'foo'".into(),
        ),
        (
            &[("hz", "x"), ("maxclients", "y")],
            failed("hz", "argument couldn't be parsed into an integer"),
        ),
        (
            &[("hz", "7"), ("maxclients", "y")],
            failed("maxclients", "argument couldn't be parsed into an integer"),
        ),
    ];
    for (pairs, want) in cases {
        let mut cfg = Config::default();
        assert_eq!(set(&mut cfg, pairs).as_ref(), Err(want), "{pairs:?}");
        assert_eq!(cfg, Config::default(), "{pairs:?} must not change anything");
    }
}

#[test]
fn config_set_is_atomic() {
    let mut cfg = Config::default();
    set(&mut cfg, &[("hz", "50"), ("maxmemory", "1mb")]).unwrap();
    let before = cfg.clone();
    let r = set(
        &mut cfg,
        &[("hz", "7"), ("maxmemory", "2mb"), ("maxclients", "y")],
    );
    assert!(r.is_err());
    assert_eq!(cfg, before);
    assert_eq!((cfg.hz, cfg.maxmemory), (50, 1 << 20));
    assert_eq!(set(&mut cfg, &[]), Ok(()));
    assert_eq!(cfg, before);
}

#[test]
fn config_error_display() {
    let e = file("port x").unwrap_err();
    assert_eq!(
        e.to_string(),
        "\n*** FATAL CONFIG FILE ERROR (Tessera 0.1.0) ***\n\
         Reading the configuration file, at line 1\n\
         >>> 'port x'\n\
         argument couldn't be parsed into an integer"
    );
    let _: &dyn std::error::Error = &e;
}

/// CONFIG SET client-output-buffer-limit: every answer checked against redis-server 7.0.15.
#[test]
fn client_output_buffer_limit_set_and_get() {
    let name = "client-output-buffer-limit";
    let mut c = Config::default();
    assert_eq!(
        get_one(&c, name),
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
    );
    let wrong = "Wrong number of arguments in buffer limit configuration.";
    let class = "Invalid client class specified in buffer limit configuration.";
    let value = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
    let cases: &[(&str, Result<&str, &str>)] = &[
        ("normal 10mb 5mb 1", Ok("normal 10485760 5242880 1")),
        ("NORMAL 1K 1g 01", Ok("normal 1000 1000000000 1")),
        ("normal 1b 2B +3", Ok("normal 1 2 3")),
        ("normal 1 1 ", Ok("normal 1 1 0")),
        ("normal 1 1 4294967297", Ok("normal 1 1 1")),
        ("normal 1 1 -4294967296", Ok("normal 1 1 0")),
        (
            "normal 99999999999999999999999 0 0",
            Ok("normal 18446744073709551615 0 0"),
        ),
        ("normal 5 5 5 normal 6 6 6", Ok("normal 6 6 6")),
        ("", Ok("normal 6 6 6")),
        ("master 0 0 0", Err(class)),
        ("foo 0 0 0", Err(class)),
        ("normal 1 2", Err(wrong)),
        ("normal  1 1 1", Err(wrong)),
        (" normal 1 1 1", Err(wrong)),
        ("normal 1 1 1 ", Err(wrong)),
        ("normal -1 0 0", Err(value)),
        ("normal +5 0 0", Err(value)),
        ("normal 0x10 0 0", Err(value)),
        ("normal 1.5 1 1", Err(value)),
        ("normal 1kbb 1 1", Err(value)),
        ("normal 1 1 1mb", Err(value)),
        ("normal 1 1 -1", Err(value)),
        ("normal 1 1 1.0", Err(value)),
        ("normal 1 1 2147483648", Err(value)),
        ("normal 1 1 9223372036854775807", Err(value)),
        ("normal 1 1 99999999999999999999", Err(value)),
        // Checked group by group: the first group is fine, the second is not.
        ("normal 1 1 1 pubsub 1 1 x", Err(value)),
        ("normal 1 1 x foo 1 1 1", Err(value)),
        ("normal 1 1 1 foo 1 1 x", Err(class)),
    ];
    for &(v, want) in cases {
        let before = get_one(&c, name);
        let r = set(&mut c, &[(name, v)]);
        match want {
            Ok(normal) => {
                assert_eq!(r, Ok(()), "{v:?}");
                let got = get_one(&c, name);
                assert!(got.starts_with(&format!("{normal} slave ")), "{v:?}: {got}");
            }
            Err(why) => {
                assert_eq!(
                    r,
                    Err(format!(
                        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                    )),
                    "{v:?}"
                );
                assert_eq!(get_one(&c, name), before, "{v:?} changed the config");
            }
        }
    }
    // Classes not named keep their limits; `replica` is `slave`.
    set(&mut c, &[(name, "replica 1 2 3 pubsub 4 5 6")]).unwrap();
    assert_eq!(get_one(&c, name), "normal 6 6 6 slave 1 2 3 pubsub 4 5 6");
    // A file may give one class per line.
    let f = file(
        "client-output-buffer-limit pubsub 1mb 1mb 0\nclient-output-buffer-limit normal 7 8 9\n",
    )
    .unwrap();
    assert_eq!(
        get_one(&f, name),
        "normal 7 8 9 slave 268435456 67108864 60 pubsub 1048576 1048576 0"
    );
}
