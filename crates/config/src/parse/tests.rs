use super::*;
use std::path::PathBuf;

use ds::string2ll;

use crate::testutil::*;
use crate::*;

/// Several `save` lines in a file add up, as Redis 7.0 reads them (the
/// first replaces the defaults; `save ""` clears what came before).
#[test]
fn save_lines_in_a_file_add_up() {
    let rules = |text: &str| {
        let mut c = Config::default();
        parse_config_text(text, &mut c).unwrap();
        c.save_rules()
    };
    assert_eq!(rules("save 900 1\nsave 300 10\n"), [(900, 1), (300, 10)]);
    assert_eq!(rules("save 900 1\nsave \"\"\n"), []);
    assert_eq!(rules("save \"\"\nsave 60 5\n"), [(60, 5)]);
    assert_eq!(rules("hz 10\n"), [(3600, 1), (300, 100), (60, 10000)]);
}

/// A user defined twice stops the start, as in Redis (its unit/acl "Test
/// loading duplicate users in config on startup" runs `redis-server --user
/// foo --user foo` and waits for it to exit: Tessera started and served,
/// and the test hung).
#[test]
fn a_user_defined_twice_is_refused() {
    for text in [
        "user foo\nuser foo",
        "user default on\nport 1\nuser default off",
    ] {
        let e = file(text).unwrap_err();
        assert!(
            e.to_string()
                .contains("Duplicate user found. A user can only be defined once in config files"),
            "{text}: {e}"
        );
    }
    let e = file("user foo\nuser foo").unwrap_err();
    assert!(
        e.to_string().contains("Error in user declaration 'foo'"),
        "{e}"
    );
    // Names are compared as written.
    assert_eq!(file("user foo\nuser FOO").unwrap().users.len(), 2);
}

#[test]
fn user_lines_are_kept_in_order() {
    let cfg = file("user alice on >a ~*\nuser bob \"(+get ~x)\"\nport 1").unwrap();
    assert_eq!(
        cfg.users,
        vec![
            vec![
                b"alice".to_vec(),
                b"on".to_vec(),
                b">a".to_vec(),
                b"~*".to_vec()
            ],
            vec![b"bob".to_vec(), b"(+get ~x)".to_vec()],
        ]
    );
    assert!(config_get(&cfg, &[b"user"]).is_empty());
}

#[test]
fn file_syntax() {
    let cfg = file(
        "# comment\n\
         \n\
         \t  \n\
         port 7001 # not a comment: wrong number of arguments? no, see below\n",
    );
    // Redis only skips lines *starting* with '#'; a trailing "#" is more arguments.
    assert_eq!(
        cfg.unwrap_err().to_string(),
        fatal(
            4,
            "port 7001 # not a comment: wrong number of arguments? no, see below",
            "wrong number of arguments"
        )
    );
    let cfg =
        file("requirepass \"a b\\n\\x41\\\"\"\nlogfile 'it\\'s here'\nport 1\nport 2").unwrap();
    assert_eq!(cfg.requirepass.as_deref(), Some(&b"a b\nA\""[..]));
    assert_eq!(cfg.logfile, Some(PathBuf::from("it's here")));
    assert_eq!(cfg.port, 2, "later lines override earlier ones");
    // Binary-safe values.
    let cfg = file("requirepass \"\\xff\\x00z\"").unwrap();
    assert_eq!(cfg.requirepass.as_deref(), Some(&[0xff, 0, b'z'][..]));
    assert_eq!(
        config_get(&cfg, &[b"requirepass"]),
        vec![("requirepass".to_string(), vec![0xff, 0, b'z'])]
    );
    // Empty strings unset optional values.
    let cfg = file("requirepass x\nrequirepass \"\"\nunixsocket ''\nbind \"\"").unwrap();
    assert_eq!(
        (cfg.requirepass, cfg.unixsocket, cfg.bind.len()),
        (None, None, 0)
    );
    // `bind` with no argument at all also means "no TCP listener" (Redis quirk).
    assert!(file("bind").unwrap().bind.is_empty());
}

#[test]
fn file_errors_are_redis_texts() {
    assert_eq!(
        file_err("port 0\nfoo bar\n"),
        fatal(2, "foo bar", "Bad directive or wrong number of arguments")
    );
    assert_eq!(
        file_err("port 0\n\n# comment\n   hz    \"x\"   \n"),
        fatal(
            4,
            "hz    \"x\"",
            "argument couldn't be parsed into an integer"
        )
    );
    assert_eq!(
        file_err("PORT 1x"),
        fatal(1, "PORT 1x", "argument couldn't be parsed into an integer")
    );
    assert_eq!(
        file_err("port abc"),
        fatal(1, "port abc", "argument couldn't be parsed into an integer")
    );
    assert_eq!(
        file_err("port 65536"),
        fatal(
            1,
            "port 65536",
            "argument must be between 0 and 65535 inclusive"
        )
    );
    assert_eq!(
        file_err("protected-mode maybe"),
        fatal(1, "protected-mode maybe", "argument must be 'yes' or 'no'")
    );
    assert_eq!(
        file_err("loglevel foo"),
        fatal(
            1,
            "loglevel foo",
            "argument(s) must be one of the following: \
             debug, verbose, notice, warning, nothing"
        )
    );
    assert_eq!(
        file_err("maxmemory-policy lru"),
        fatal(
            1,
            "maxmemory-policy lru",
            "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
             volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, \
             noeviction"
        )
    );
    assert_eq!(
        file_err("maxmemory 1x"),
        fatal(1, "maxmemory 1x", "argument must be a memory value")
    );
    assert_eq!(
        file_err("proto-max-bulk-len 100"),
        fatal(
            1,
            "proto-max-bulk-len 100",
            "argument must be between 1048576 and 9223372036854775807 inclusive"
        )
    );
    assert_eq!(
        file_err("unixsocketperm 8"),
        fatal(
            1,
            "unixsocketperm 8",
            "argument couldn't be parsed as an octal number"
        )
    );
    assert_eq!(
        file_err("unixsocketperm 1000"),
        fatal(
            1,
            "unixsocketperm 1000",
            "argument must be between 0 and 777 inclusive"
        )
    );
    assert_eq!(
        file_err("databases 0"),
        fatal(
            1,
            "databases 0",
            "argument must be between 1 and 1024 inclusive"
        )
    );
    assert_eq!(
        file_err("maxclients 0"),
        fatal(
            1,
            "maxclients 0",
            "argument must be between 1 and 4294967295 inclusive"
        )
    );
    assert_eq!(
        file_err("timeout -1"),
        fatal(
            1,
            "timeout -1",
            "argument must be between 0 and 2147483647 inclusive"
        )
    );
    assert_eq!(
        file_err("port 0\nport"),
        fatal(2, "port", "wrong number of arguments")
    );
    assert_eq!(
        file_err("port 1 2"),
        fatal(1, "port 1 2", "wrong number of arguments")
    );
    assert_eq!(
        file_err("requirepass \"abc"),
        fatal(
            1,
            "requirepass \"abc",
            "Unbalanced quotes in configuration line"
        )
    );
    assert_eq!(
        file_err("requirepass \"abc\"x"),
        fatal(
            1,
            "requirepass \"abc\"x",
            "Unbalanced quotes in configuration line"
        )
    );
    assert_eq!(
        file_err("bind 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"),
        fatal(
            1,
            "bind 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17",
            "Too many bind addresses specified."
        )
    );
    assert_eq!(
        file_err("include /etc/other.conf"),
        fatal(
            1,
            "include /etc/other.conf",
            "include is not supported by Tessera: put every directive in one file"
        )
    );
    let e = file("\n\nhz x").unwrap_err();
    assert_eq!(e.line_no(), Some(3));
    assert_eq!(e.reason(), "argument couldn't be parsed into an integer");
}

#[test]
fn hz_is_clamped_like_redis() {
    assert_eq!(file("hz 1000").unwrap().hz, 500);
    assert_eq!(file("hz 0").unwrap().hz, 1);
    assert_eq!(get_one(&file("hz 1000").unwrap(), "hz"), "500");
}

// ----- value parsers ---------------------------------------------------------------------

#[test]
fn memory_units_are_memtoull() {
    let cases: &[(&str, Option<u64>)] = &[
        ("0", Some(0)),
        ("123", Some(123)),
        ("123b", Some(123)),
        ("1k", Some(1000)),
        ("1K", Some(1000)),
        ("1kb", Some(1024)),
        ("1Kb", Some(1024)),
        ("1KB", Some(1024)),
        ("3m", Some(3_000_000)),
        ("3mb", Some(3 << 20)),
        ("2g", Some(2_000_000_000)),
        ("2GB", Some(2 << 30)),
        // Redis quirks: nothing, or a unit alone, is zero.
        ("", Some(0)),
        ("kb", Some(0)),
        // strtoull saturates and Redis 7.0 does not check.
        ("99999999999999999999", Some(u64::MAX)),
        ("18446744073709551615", Some(u64::MAX)),
        // Redis 7.0 wraps here; we refuse.
        ("99999999999gb", None),
        ("-1", None),
        ("1x", None),
        ("1 kb", None),
        (" 1", None),
        ("1.5gb", None),
        ("1tb", None),
        ("+1", None),
    ];
    for &(s, want) in cases {
        assert_eq!(memtoull(s.as_bytes()), want, "{s:?}");
    }
    assert_eq!(memtoull("1".repeat(128).as_bytes()), None);
    assert_eq!(file("maxmemory 1Kb").unwrap().maxmemory, 1024);
    assert_eq!(
        get_one(&file("maxmemory 1gb").unwrap(), "maxmemory"),
        "1073741824"
    );
}

#[test]
fn integers_are_string2ll() {
    let cases: &[(&str, Option<i64>)] = &[
        ("0", Some(0)),
        ("7", Some(7)),
        ("-7", Some(-7)),
        ("9223372036854775807", Some(i64::MAX)),
        ("-9223372036854775808", Some(i64::MIN)),
        ("9223372036854775808", None),
        ("-9223372036854775809", None),
        ("007", None),
        ("+7", None),
        (" 7", None),
        ("7 ", None),
        ("-0", None),
        ("-", None),
        ("", None),
        ("1e3", None),
    ];
    for &(s, want) in cases {
        assert_eq!(string2ll(s.as_bytes()), want, "{s:?}");
    }
}

#[test]
fn octal_is_strtoll_base_8() {
    let cases: &[(&str, Option<i64>)] = &[
        ("0", Some(0)),
        ("700", Some(0o700)),
        ("0700", Some(0o700)),
        ("+17", Some(0o17)),
        ("-1", Some(-1)),
        ("  755", Some(0o755)),
        ("", Some(0)),
        ("8", None),
        ("755 ", None),
        (" ", None),
        ("+", None),
        ("0x1", None),
        ("7777777777777777777777", None),
    ];
    for &(s, want) in cases {
        assert_eq!(strtoll_octal(s.as_bytes()), want, "{s:?}");
    }
    assert_eq!(file("unixsocketperm 0770").unwrap().unixsocketperm, 0o770);
    assert_eq!(
        file_err("unixsocketperm -1"),
        fatal(
            1,
            "unixsocketperm -1",
            "argument must be between 0 and 777 inclusive"
        )
    );
}

#[test]
fn bools_and_enums_are_case_insensitive() {
    assert!(!file("protected-mode NO").unwrap().protected_mode);
    assert!(file("protected-mode Yes").unwrap().protected_mode);
    assert_eq!(file("loglevel DEBUG").unwrap().loglevel, LogLevel::Debug);
    assert_eq!(
        file("loglevel nothing").unwrap().loglevel,
        LogLevel::Nothing
    );
    assert_eq!(
        file("maxmemory-policy Volatile-TTL")
            .unwrap()
            .maxmemory_policy,
        MaxmemoryPolicy::VolatileTtl
    );
    assert_eq!(
        get_one(&file("loglevel VERBOSE").unwrap(), "loglevel"),
        "verbose"
    );
}

#[test]
fn split_args_is_sdssplitargs() {
    let split = |s: &str| {
        split_args(s.as_bytes()).map(|v| {
            v.into_iter()
                .map(|w| String::from_utf8(w).unwrap())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(split(""), Some(vec![]));
    assert_eq!(split("  a  b\tc "), Some(strings(&["a", "b", "c"])));
    assert_eq!(split("\"a b\" 'c d'"), Some(strings(&["a b", "c d"])));
    assert_eq!(split("ab\"cd\""), Some(strings(&["abcd"])));
    assert_eq!(
        split("\"\\t\\r\\n\\a\\b\\q\\\\\""),
        Some(strings(&["\t\r\n\x07\x08q\\"]))
    );
    assert_eq!(split("\"\\x4a\\x4B\\x4\""), Some(strings(&["JKx4"])));
    assert_eq!(split("'a\\'b\\n'"), Some(strings(&["a'b\\n"])));
    assert_eq!(split("\"\""), Some(strings(&[""])));
    assert_eq!(split("\"a"), None);
    assert_eq!(split("'a"), None);
    assert_eq!(split("\"a\"b"), None);
    assert_eq!(split("'a'b"), None);
    assert_eq!(split("a\0b c"), Some(strings(&["a"])));
}

#[test]
fn repr_is_sdscatrepr() {
    let mut out = Vec::new();
    cat_repr(&mut out, "a\"b\\c\n\r\t\x07\x08\x01é~".as_bytes());
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "\"a\\\"b\\\\c\\n\\r\\t\\a\\b\\x01\\xc3\\xa9~\""
    );
}

#[test]
fn rename_command_lines_are_kept_in_order() {
    let mut c = Config::default();
    parse_config_text(
        "port 1\nrename-command SET myset\nrename-command DEBUG \"\"\n",
        &mut c,
    )
    .unwrap();
    assert_eq!(c.rename_commands.len(), 2);
    assert_eq!(c.rename_commands[0].from, b"SET");
    assert_eq!(c.rename_commands[0].to, b"myset");
    assert_eq!(c.rename_commands[0].line_no, 2);
    assert_eq!(c.rename_commands[1].to, b"");
    let e = parse_config_text("rename-command SET\n", &mut c).unwrap_err();
    assert_eq!(e.reason(), "Bad directive or wrong number of arguments");
    // Not a directive: CONFIG GET does not know it.
    assert!(config_get(&c, &[b"rename-command".as_slice()]).is_empty());
}
