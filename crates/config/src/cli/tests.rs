use super::*;
use std::path::PathBuf;

use crate::testutil::*;
use crate::*;

#[test]
fn cli_help_and_version() {
    for flag in ["-h", "--help"] {
        let r = parse_cli_with(&strings(&[flag, "ignored"]), &no_file, &no_stdin);
        assert_eq!(r, Ok(CliAction::Help(help_text())));
    }
    for flag in ["-v", "--version"] {
        let r = parse_cli_with(&strings(&[flag]), &no_file, &no_stdin);
        assert_eq!(r, Ok(CliAction::Version(version_text())));
    }
    assert_eq!(
        version_text(),
        "Tessera server v=0.1.0 sha=00000000:0 malloc=libc bits=64"
    );
    let help = help_text();
    assert!(help.starts_with("Usage: ./tessera [/path/to/tessera.conf] [options] [-]\n"));
    assert!(help.contains("\n       ./tessera -v or --version\n"));
    assert!(help.contains("\n       ./tessera --port 7777\n"));
    for d in DIRECTIVES.iter().filter(|d| !d.hidden) {
        assert!(help.contains(&format!(" {} ", d.name)), "{}", d.name);
    }
    assert!(
        help.contains("   * hz                           10\n"),
        "{help}"
    );
    assert!(
        help.contains("     shards                       0 (alias threads)\n"),
        "{help}"
    );
    // Only as the first argument, as in redis-server.
    assert_eq!(
        cli_err(&["--port", "0", "--version"]),
        fatal(3, "version", "Bad directive or wrong number of arguments")
    );
}

#[test]
fn cli_without_arguments_is_the_default() {
    assert_eq!(cli(&[]).unwrap(), Config::default());
}

/// Each case was run against `redis-server` 7.0.15: command-line arguments become config
/// lines after an empty first line, so line numbers start at 2.
#[test]
fn cli_errors_are_redis_texts() {
    assert_eq!(
        cli_err(&["--port", "0", "--foo", "bar"]),
        fatal(
            3,
            "foo \"bar\"",
            "Bad directive or wrong number of arguments"
        )
    );
    assert_eq!(
        cli_err(&["--port", "abc"]),
        fatal(
            2,
            "port \"abc\"",
            "argument couldn't be parsed into an integer"
        )
    );
    assert_eq!(
        cli_err(&["--port", "0", "--hz", "x"]),
        fatal(3, "hz \"x\"", "argument couldn't be parsed into an integer")
    );
    assert_eq!(
        cli_err(&["--port", "0", "--protected-mode", "maybe"]),
        fatal(
            3,
            "protected-mode \"maybe\"",
            "argument must be 'yes' or 'no'"
        )
    );
    assert_eq!(
        cli_err(&["--port"]),
        fatal(2, "port", "wrong number of arguments")
    );
    assert_eq!(
        cli_err(&["--port", "0", "--hz"]),
        fatal(3, "hz", "wrong number of arguments")
    );
    // A name without value swallows the next `--x` as its value.
    assert_eq!(
        cli_err(&["--port", "--hz", "5"]),
        fatal(2, "port \"--hz\" \"5\"", "wrong number of arguments")
    );
    assert_eq!(
        cli_err(&["--port 0", "--hz", "x"]),
        fatal(3, "hz \"x\"", "argument couldn't be parsed into an integer")
    );
    assert_eq!(
        cli_err(&["--port", "0", "--requirepass", "a\"b", "--hz", "x"]),
        fatal(4, "hz \"x\"", "argument couldn't be parsed into an integer")
    );
    assert_eq!(
        cli_err(&["--port", "0", "--requirepass", "a\x01b\tc", "x"]),
        fatal(
            3,
            "requirepass \"a\\x01b\\tc\" \"x\"",
            "wrong number of arguments"
        )
    );
    assert_eq!(
        cli_err(&["--port", "0", "extra"]),
        fatal(2, "port \"0\" \"extra\"", "wrong number of arguments")
    );
    assert_eq!(
        cli_err(&["--port", "0", "--bind", "1.2.3.4", "5.6.7.8", "--", "--hz", "x"]),
        fatal(
            4,
            "\"--hz\" \"x\"",
            "Bad directive or wrong number of arguments"
        )
    );
    assert_eq!(
        cli_err(&["--port", "0", "--unixsocketperm", "8"]),
        fatal(
            3,
            "unixsocketperm \"8\"",
            "argument couldn't be parsed as an octal number"
        )
    );
    assert_eq!(
        cli_err(&["--port", "0", "--maxmemory", "1x"]),
        fatal(3, "maxmemory \"1x\"", "argument must be a memory value")
    );
    // A trailing `--` is an empty line.
    assert_eq!(cli(&["--port", "0", "--"]).unwrap().port, 0);
}

#[test]
fn cli_values_keep_their_bytes() {
    let cfg = cli(&["--requirepass", "a \"b\"\\c\n"]).unwrap();
    assert_eq!(cfg.requirepass.as_deref(), Some(&b"a \"b\"\\c\n"[..]));
    let cfg = cli(&["--requirepass", ""]).unwrap();
    assert_eq!(cfg.requirepass, None);
}

#[test]
fn cli_overrides_the_file_and_counts_its_lines() {
    let conf = "port 7000\nhz 20\n";
    let Ok(CliAction::Run(cfg)) = cli_with_file(&["/etc/t.conf", "--port", "7001"], conf) else {
        panic!()
    };
    assert_eq!((cfg.port, cfg.hz), (7001, 20));
    assert_eq!(cfg.config_file, Some(PathBuf::from("/etc/t.conf")));
    // File with a final newline: its 2 lines, the separator line, then the options.
    assert_eq!(
        cli_with_file(&["/etc/t.conf", "--hz", "x"], conf)
            .unwrap_err()
            .to_string(),
        fatal(4, "hz \"x\"", "argument couldn't be parsed into an integer")
    );
    // Without it, the separator ends the last line.
    assert_eq!(
        cli_with_file(&["/etc/t.conf", "--hz", "x"], "port 0\nhz 3")
            .unwrap_err()
            .to_string(),
        fatal(3, "hz \"x\"", "argument couldn't be parsed into an integer")
    );
    assert_eq!(
        cli_with_file(&["/etc/t.conf"], "port 0\n\n# c\n   hz    \"x\"   \n")
            .unwrap_err()
            .to_string(),
        fatal(
            4,
            "hz    \"x\"",
            "argument couldn't be parsed into an integer"
        )
    );
    // A relative path is made absolute, as Redis does.
    let Ok(CliAction::Run(cfg)) = cli_with_file(&["t.conf"], "") else {
        panic!()
    };
    let path = cfg.config_file.unwrap();
    assert!(path.is_absolute() && path.ends_with("t.conf"), "{path:?}");
}

#[test]
fn cli_reads_stdin_for_dash() {
    let stdin = || Ok(b"hz 30\nport 7002".to_vec());
    let run = |a: &[&str]| match parse_cli_with(&strings(a), &|_| Ok(b"hz 20\n".to_vec()), &stdin) {
        Ok(CliAction::Run(cfg)) => (cfg.hz, cfg.port),
        other => panic!("{other:?}"),
    };
    assert_eq!(run(&["-"]), (30, 7002));
    assert_eq!(run(&["/etc/t.conf", "-"]), (30, 7002));
    assert_eq!(run(&["/etc/t.conf", "--port", "1", "-"]), (30, 1));
    assert_eq!(run(&["-", "--port", "1"]), (30, 1));
    assert_eq!(run(&["/etc/t.conf"]), (20, 6379));
    // In the middle, `-` is a value.
    let r = parse_cli_with(
        &strings(&["--hz", "5", "-", "--port", "1"]),
        &no_file,
        &no_stdin,
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        fatal(2, "hz \"5\" \"-\"", "wrong number of arguments")
    );
}

#[test]
fn cli_reports_unreadable_files_like_redis() {
    let dir = std::env::temp_dir().join(format!("tessera-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.conf");
    let e = parse_cli(&[missing.display().to_string()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "Fatal error, can't open config file '{}': No such file or directory",
            missing.display()
        )
    );
    assert_eq!(e.line_no(), None);
    let present = dir.join("present.conf");
    std::fs::write(&present, "port 7003\nmaxmemory 1mb\n").unwrap();
    let r = parse_cli(&[present.display().to_string(), "--hz".into(), "11".into()]);
    let Ok(CliAction::Run(cfg)) = r else {
        panic!("{r:?}")
    };
    assert_eq!((cfg.port, cfg.maxmemory, cfg.hz), (7003, 1 << 20, 11));
    std::fs::remove_dir_all(&dir).unwrap();

    let big = vec![b'#'; MAX_CONFIG_BYTES as usize + 1];
    let e = parse_cli_with(&strings(&["/big.conf"]), &|_| Ok(big.clone()), &no_stdin);
    assert_eq!(
        e.unwrap_err().to_string(),
        "Fatal error, config text is larger than 16777216 bytes"
    );
}

/// Redis 7.0.15's special case: `--save` followed by another option, or
/// last, means `save ""` (Tcl unit/introspection 'save with empty input').
#[test]
fn cli_save_without_a_value_has_no_rules() {
    for args in [
        &["--save", "--loglevel", "verbose"][..],
        &["--loglevel", "verbose", "--save"],
        &["--save", "", "--loglevel", "verbose"],
        &["--loglevel", "verbose", "--save", ""],
        &["--SAVE", "--loglevel", "verbose"],
    ] {
        let cfg = cli(args).unwrap();
        assert_eq!(get_one(&cfg, "save"), "", "{args:?}");
        assert_eq!(get_one(&cfg, "loglevel"), "verbose", "{args:?}");
    }
    // A value that is not an option is the rule, as before.
    assert_eq!(get_one(&cli(&["--save", "10 1"]).unwrap(), "save"), "10 1");
    // Only `save`: another option without a value still takes the next word.
    assert!(cli(&["--loglevel", "--save", "10 1"]).is_err());
}
