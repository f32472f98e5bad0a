//! In-process tests of scripting through the real dispatch.

use crate::table::shard_of;
use crate::testutil::TestServer;

/// A key on shard `s` of `n`, with a prefix.
fn key_on(prefix: &str, s: usize, n: usize) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| shard_of(k.as_bytes(), n) == s)
        .expect("a key on every shard")
}

#[test]
fn eval_basics_and_conversions() {
    let mut t = TestServer::new(1);
    assert_eq!(t.run(&["EVAL", "return 1", "0"]), ":1\r\n");
    assert_eq!(
        t.run(&["EVAL", "return {1,2,3,'ciao',{1,2}}", "0"]),
        "*5\r\n:1\r\n:2\r\n:3\r\n$4\r\nciao\r\n*2\r\n:1\r\n:2\r\n"
    );
    assert_eq!(
        t.run(&[
            "EVAL",
            "return {KEYS[1], ARGV[1], ARGV[2]}",
            "1",
            "k",
            "a",
            "b"
        ]),
        "*3\r\n$1\r\nk\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        t.run(&[
            "EVAL",
            "return redis.call('set', KEYS[1], ARGV[1])",
            "1",
            "k",
            "v"
        ]),
        "+OK\r\n"
    );
    assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(
        t.run(&["EVAL", "return redis.call('get', KEYS[1])", "1", "nope"]),
        "$-1\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.call('incr', 'n') + 0.5", "0"]),
        ":1\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.sha1hex('')", "0"]),
        "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"
    );
    assert_eq!(
        t.run(&[
            "EVAL",
            "return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}",
            "0"
        ]),
        "*2\r\n$6\r\n7.0.15\r\n:458767\r\n"
    );
    assert_eq!(
        t.run(&[
            "EVAL",
            "redis.setresp(3); return redis.call('hgetall', 'nohash')",
            "0"
        ]),
        "*0\r\n"
    );
    t.client.resp3 = true;
    assert_eq!(
        t.run(&[
            "EVAL",
            "redis.setresp(3); return redis.call('hgetall', 'nohash')",
            "0"
        ]),
        "%0\r\n"
    );
    assert_eq!(t.run(&["EVAL", "return false", "0"]), "_\r\n");
    assert_eq!(
        t.run(&["EVAL", "redis.setresp(3); return false", "0"]),
        "#f\r\n"
    );
}

#[test]
fn errors_as_redis() {
    let mut t = TestServer::new(1);
    t.run(&["SET", "s", "x"]);
    assert_eq!(
        t.run(&["EVAL", "return foo", "0"]),
        "-ERR user_script:1: Script attempted to access nonexistent global variable 'foo' script: 47e30a5d10d5694f99208f9adc4fe3bf2450edbd, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "\n\nfoo = 1", "0"]),
        "-ERR user_script:3: Attempt to modify a readonly table script: b192b786614ae8931ac7a90e825d13ec8245afc0, on @user_script:3.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.call('nosuch')", "0"]),
        "-ERR Unknown Redis command called from script script: 206396248e12c6e742fd7296250433c8d7343b74, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.pcall('nosuch')", "0"]),
        "-ERR Unknown Redis command called from script\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.call('incr','s')", "0"]),
        "-ERR value is not an integer or out of range script: c243b9f46db13ba8f69da41b45a77708832babed, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&[
            "EVAL",
            "local ok, e = pcall(redis.call, 'incr','s'); return e",
            "0"
        ]),
        "$43\r\nERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return 1 +", "0"]),
        "-ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "\nlocal x = 1\nerror('deep')", "0"]),
        "-ERR user_script:3: deep script: 5d17d6021d530cde261d43579dc2a017e353f029, on @user_script:3.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "error({err='x'})", "0"]),
        "-x script: 0e48b9b90bf7d59e383ba68c5e1e495ef87146a8, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return {err='My Error'}", "0"]),
        "-My Error\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.error_reply('x')", "0"]),
        "-ERR x\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.call('eval_ro', 'return 1', 0)", "0"]),
        "-ERR This Redis command is not allowed from script script: e22328399883591282d5e270d87600c029b63704, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return redis.call('get')", "0"]),
        "-ERR Wrong number of args calling Redis command from script script: f187dee77f607f7cff00bbabc9df38507582c78d, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL_RO", "return redis.call('set','x','y')", "1", "x"]),
        "-ERR Write commands are not allowed from read-only scripts. script: 71e6319f97b0fe8bdfa1c5df3ce4489946dda479, on @user_script:1.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return 1", "-1"]),
        "-ERR Number of keys can't be negative\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return 1", "2", "a"]),
        "-ERR Number of keys can't be greater than number of args\r\n"
    );
    assert_eq!(
        t.run(&["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"]),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "#!lua flags=no-writes,bad\nreturn 1", "0"]),
        "-ERR Unexpected flag in script shebang: bad\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "#!lua flags=no-writes\nreturn redis.call('set','x','y')", "1", "x"]),
        "-ERR Write commands are not allowed from read-only scripts. script: 43f5fe910d84b5ee2ef496f122831920e4095915, on @user_script:2.\r\n"
    );
    assert_eq!(
        t.run(&["EVAL_RO", "#!lua\nreturn 1", "0"]),
        "-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
}

#[test]
fn the_sandbox() {
    let mut t = TestServer::new(1);
    for g in [
        "print", "loadfile", "dofile", "require", "os", "io", "setfenv", "debug",
    ] {
        let r = t.run(&["EVAL", &format!("return type({g})"), "0"]);
        assert!(r.contains("nonexistent global variable"), "{g}: {r}");
    }
    for g in ["loadstring", "pcall", "unpack", "gcinfo"] {
        assert_eq!(
            t.run(&["EVAL", &format!("return type({g})"), "0"]),
            "$8\r\nfunction\r\n",
            "{g}"
        );
    }
    for lib in [
        "bit", "cjson", "cmsgpack", "struct", "string", "math", "table", "redis",
    ] {
        assert_eq!(
            t.run(&["EVAL", &format!("return type({lib})"), "0"]),
            "$5\r\ntable\r\n",
            "{lib}"
        );
    }
    // No script can change what the next one sees.
    let r = t.run(&["EVAL", "redis.call = function() return 1 end", "0"]);
    assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    let r = t.run(&["EVAL", "string.foo = 1", "0"]);
    assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    let r = t.run(&["EVAL", "rawset(_G, 'x', 1)", "0"]);
    assert!(
        r.starts_with("-ERR Attempt to modify a readonly table script:"),
        "{r}"
    );
    let r = t.run(&["EVAL", "loadstring('x = 1')()", "0"]);
    assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    assert_eq!(
        t.run(&["EVAL", "return redis.call('ping')", "0"]),
        "+PONG\r\n"
    );
    assert_eq!(
        t.run(&[
            "EVAL",
            "local n = 0; for k in pairs(redis) do n = n + 1 end; return n > 10",
            "0"
        ]),
        ":1\r\n"
    );
    assert_eq!(
        t.run(&["EVAL", "return rawget(_G, 'redis') ~= nil", "0"]),
        ":1\r\n"
    );
    // Locals and KEYS work.
    assert_eq!(t.run(&["EVAL", "local x = 5; return x", "0"]), ":5\r\n");
    assert_eq!(
        t.run(&["EVAL", "KEYS[1] = 'x'; return KEYS[1]", "1", "a"]),
        "$1\r\nx\r\n"
    );
}

#[test]
fn script_cache_commands() {
    let mut t = TestServer::new(2);
    let sha = "135aaede384a3ae6d8543d14ac18efe0b4b0b136"; // "return 'cache-test'"
    assert_eq!(
        t.run(&["SCRIPT", "LOAD", "return 'cache-test'"]),
        format!("$40\r\n{sha}\r\n")
    );
    assert_eq!(
        t.run(&["SCRIPT", "EXISTS", sha, &sha.to_uppercase(), "nope"]),
        "*3\r\n:1\r\n:1\r\n:0\r\n"
    );
    assert_eq!(t.run(&["EVALSHA", sha, "0"]), "$10\r\ncache-test\r\n");
    assert_eq!(
        t.run(&["SCRIPT", "LOAD", "return 1 +"]),
        "-ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'\r\n"
    );
    assert_eq!(
        t.run(&["SCRIPT", "FLUSH", "foo"]),
        "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n"
    );
    assert_eq!(
        t.run(&["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    assert_eq!(t.run(&["SCRIPT", "DEBUG", "NO"]), "+OK\r\n");
    assert!(t.run(&["SCRIPT", "HELP"]).starts_with("*17\r\n"));
}

/// A field of `INFO section` as text.
fn info_field(t: &mut TestServer, section: &str, field: &str) -> String {
    let info = t.run(&["INFO", section]);
    let prefix = format!("{field}:");
    let line = info.split("\r\n").find(|l| l.starts_with(&prefix));
    line.unwrap_or_else(|| panic!("no {field} in {info}"))[prefix.len()..].to_string()
}

/// The script cache is the server's (`ops.scripts`), not the process's:
/// of two servers in one process (tests build one each), neither sees
/// the other's scripts, and one's SCRIPT FLUSH leaves the other's.
#[test]
fn each_server_has_a_script_cache_of_its_own() {
    let (mut a, mut b) = (TestServer::new(1), TestServer::new(2));
    let body = "return 'one server only'";
    let sha = String::from_utf8(super::sha1::hex(body.as_bytes()).to_vec()).unwrap();
    let bulk = format!("$40\r\n{sha}\r\n");
    assert_eq!(a.run(&["SCRIPT", "LOAD", body]), bulk);
    assert_eq!(b.run(&["SCRIPT", "EXISTS", &sha]), "*1\r\n:0\r\n");
    assert_eq!(
        b.run(&["EVALSHA", &sha, "0"]),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(
        info_field(&mut b, "memory", "number_of_cached_scripts"),
        "0"
    );
    assert_eq!(b.run(&["SCRIPT", "LOAD", body]), bulk);
    assert_eq!(
        info_field(&mut b, "memory", "number_of_cached_scripts"),
        "1"
    );
    assert_eq!(a.run(&["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(a.run(&["SCRIPT", "EXISTS", &sha]), "*1\r\n:0\r\n");
    assert_eq!(b.run(&["EVALSHA", &sha, "0"]), "$15\r\none server only\r\n");
    assert_eq!(
        info_field(&mut b, "memory", "number_of_cached_scripts"),
        "1"
    );
    // Both servers run on this thread: its VM serves one at a time,
    // made anew for the other (`vm::with_vm`), each counted by its own.
    assert_eq!(a.run(&["EVAL", "return 2", "0"]), ":2\r\n");
    assert_eq!(b.run(&["EVALSHA", &sha, "0"]), "$15\r\none server only\r\n");
    let lua = |t: &mut TestServer| info_field(t, "memory", "used_memory_lua");
    assert_ne!(lua(&mut b), "0");
    assert_eq!(
        lua(&mut a),
        "0",
        "the VM serving the other server counted here"
    );
}

/// The function libraries are the server's (`ops.functions`), not the
/// process's: of two servers in one process, neither sees the other's
/// libraries, and one's FUNCTION FLUSH leaves the other's.
#[test]
fn each_server_has_function_libraries_of_its_own() {
    let (mut a, mut b) = (TestServer::new(1), TestServer::new(2));
    let lib = |v: &str| {
        format!(
            "#!lua name=perserver\n\
             redis.register_function('perserver_fn', function() return '{v}' end)"
        )
    };
    let name = "$9\r\nperserver\r\n";
    assert_eq!(a.run(&["FUNCTION", "LOAD", &lib("a")]), name);
    assert_eq!(
        b.run(&["FCALL", "perserver_fn", "0"]),
        "-ERR Function not found\r\n"
    );
    assert_eq!(b.run(&["FUNCTION", "LIST"]), "*0\r\n");
    assert_eq!(info_field(&mut b, "memory", "number_of_libraries"), "0");
    assert_eq!(b.run(&["FUNCTION", "LOAD", &lib("b")]), name);
    // Both run on this thread: its function VM serves one at a time.
    assert_eq!(a.run(&["FCALL", "perserver_fn", "0"]), "$1\r\na\r\n");
    assert_eq!(b.run(&["FCALL", "perserver_fn", "0"]), "$1\r\nb\r\n");
    assert_eq!(a.run(&["FUNCTION", "FLUSH"]), "+OK\r\n");
    assert_eq!(
        a.run(&["FCALL", "perserver_fn", "0"]),
        "-ERR Function not found\r\n"
    );
    assert_eq!(b.run(&["FCALL", "perserver_fn", "0"]), "$1\r\nb\r\n");
    assert_eq!(info_field(&mut b, "memory", "number_of_libraries"), "1");
    assert_eq!(info_field(&mut a, "memory", "number_of_libraries"), "0");
}

#[test]
fn keys_on_several_shards_run_on_their_copies() {
    let n = 3;
    let mut t = TestServer::new(n);
    let a = key_on("a", 0, n);
    let b = key_on("b", 2, n);
    t.run(&["RPUSH", &a, "x", "y"]);
    let script = "local v = redis.call('rpop', KEYS[1]); redis.call('lpush', KEYS[2], v); \
                  return {redis.call('llen', KEYS[1]), redis.call('llen', KEYS[2])}";
    assert_eq!(t.run(&["EVAL", script, "2", &a, &b]), "*2\r\n:1\r\n:1\r\n");
    assert_eq!(t.run(&["LRANGE", &b, "0", "-1"]), "*1\r\n$1\r\ny\r\n");
    assert_eq!(t.run(&["LMOVE", &a, &b, "LEFT", "LEFT"]), "$1\r\nx\r\n");
    // An undeclared key of another shard runs again under wider locks.
    let c = key_on("c", 1, n);
    t.run(&["SET", &c, "cv"]);
    let r = t.run(&[
        "EVAL",
        "return redis.call('get', KEYS[1] .. '') or redis.call('get', ARGV[1])",
        "2",
        &a,
        &b,
        &c,
    ]);
    assert_eq!(r, "$2\r\ncv\r\n");
    // Another database on copies: refused, not a crash.
    let r = t.run(&[
        "EVAL",
        "redis.call('select', 5); return redis.call('get', KEYS[1])",
        "2",
        &a,
        &b,
    ]);
    assert!(
        r.starts_with("-ERR Script attempted to access a key"),
        "{r}"
    );
    let r = t.run(&[
        "EVAL",
        "redis.call('select', 5); return redis.call('ping')",
        "2",
        &a,
        &b,
    ]);
    assert_eq!(r, "+PONG\r\n");
    // Undeclared keys of the script's own shard work.
    let a2 = key_on("z", 0, n);
    t.run(&["SET", &a2, "here"]);
    assert_eq!(
        t.run(&["EVAL", "return redis.call('get', ARGV[1])", "1", &a, &a2]),
        "$4\r\nhere\r\n"
    );
}

#[test]
fn bad_input_is_an_error_not_a_crash() {
    let mut t = TestServer::new(1);
    let e = |t: &mut TestServer, s: &str| t.run(&["EVAL", s, "0"]);
    let r = e(
        &mut t,
        "local function f(n) return 1 + f(n) end return f(1)",
    );
    assert!(r.starts_with("-ERR user_script:1: stack overflow"), "{r}");
    // Recursion through pcall ends at Lua's C stack limit (Redis: 1).
    assert_eq!(
        e(&mut t, "local function f() return pcall(f) end return f()"),
        ":1\r\n"
    );
    let r = e(
        &mut t,
        "local function f() return redis.pcall('ping') .. f() end return f()",
    );
    assert!(r.starts_with("-ERR"), "{r}");
    // Lua 5.1 reads the count as a C int: 2^40 is 0.
    assert_eq!(e(&mut t, "return string.rep('x', 2^40)"), "$0\r\n\r\n");
    let r = e(&mut t, "return cjson.decode(string.rep('[', 100000))");
    assert!(
        r.contains("Found too many nested data structures (1001)"),
        "{r}"
    );
    let r = e(
        &mut t,
        "return cmsgpack.unpack(string.rep(string.char(0x91), 100000))",
    );
    assert!(r.starts_with("-ERR"), "{r}");
    let r = e(&mut t, "return struct.pack('i' .. string.rep('9', 30), 1)");
    assert!(r.starts_with("-ERR"), "{r}");
    // The VM still works afterwards.
    assert_eq!(e(&mut t, "return 'fine'"), "$4\r\nfine\r\n");
}

/// Commands a script runs count in INFO commandstats and
/// total_commands_processed, as in Redis.
#[test]
fn commands_run_by_scripts_count_in_commandstats() {
    let mut t = TestServer::new(1);
    t.run(&["SET", "k", "v"]);
    t.run(&[
        "EVAL",
        "redis.call('set', KEYS[1], 0) redis.call('expire', KEYS[1], 0) \
         redis.call('geoadd', KEYS[1], 0, 0, 'bar')",
        "1",
        "k",
    ]);
    let r = t.run(&["INFO", "commandstats"]);
    for want in [
        "\r\ncmdstat_eval:calls=1,",
        "\r\ncmdstat_set:calls=2,",
        "\r\ncmdstat_expire:calls=1,",
        "\r\ncmdstat_geoadd:calls=1,",
    ] {
        assert!(r.contains(want), "{want} in {r}");
    }
    let r = t.run(&["INFO", "stats"]);
    assert!(r.contains("\r\ntotal_commands_processed:5\r\n"), "{r}");
}

/// A failed `redis.call` counts as a failed call of its command and in
/// its latency histogram, and once in errorstats (the script's own error
/// reply), as Redis 7.0.15 counts them. The first script creates the VM
/// (its statistics drained after), the later ones run with the thread's
/// lent (`vm::lend_stats`): both count the same.
#[test]
fn failed_script_calls_count_once_in_errorstats() {
    let mut t = TestServer::new(1);
    t.run(&["SET", "s", "abc"]);
    for script in [
        "return redis.pcall('incr', KEYS[1])",
        "return redis.call('incr', KEYS[1])",
        "redis.call('set', KEYS[1], 'x') return redis.call('get', KEYS[1])",
    ] {
        t.run(&["EVAL", script, "1", "s"]);
    }
    let r = t.run(&["INFO", "errorstats"]);
    assert!(r.contains("\r\nerrorstat_ERR:count=2\r\n"), "{r}");
    let r = t.run(&["INFO", "stats"]);
    assert!(r.contains("\r\ntotal_error_replies:2\r\n"), "{r}");
    let r = t.run(&["INFO", "commandstats"]);
    for want in ["\r\ncmdstat_eval:calls=3,", "\r\ncmdstat_get:calls=1,"] {
        assert!(r.contains(want), "{want} in {r}");
    }
    let incr = r
        .lines()
        .find(|l| l.starts_with("cmdstat_incr:"))
        .unwrap_or("");
    assert!(
        incr.starts_with("cmdstat_incr:calls=2,") && incr.ends_with(",failed_calls=2"),
        "{r}"
    );
    let r = t.run(&["INFO", "latencystats"]);
    for want in [
        "latency_percentiles_usec_incr:",
        "latency_percentiles_usec_get:",
    ] {
        assert!(r.contains(want), "{want} in {r}");
    }
}

#[test]
fn undeclared_keys_of_other_shards_run_again_wider() {
    let n = 4;
    let mut t = TestServer::new(n);
    let a = key_on("a", 0, n);
    let b = key_on("b", 1, n);
    let c = key_on("c", 2, n);
    let d = key_on("d", 3, n);
    t.run(&["SET", &b, "bee"]);
    // Read one undeclared key of another shard, from a one-shard script.
    assert_eq!(
        t.run(&[
            "EVAL",
            "return {redis.call('get', KEYS[1]), redis.call('get', ARGV[1])}",
            "1",
            &a,
            &b
        ]),
        "*2\r\n$-1\r\n$3\r\nbee\r\n"
    );
    // Writes to undeclared keys, found one after another (three rounds),
    // with no key declared at all.
    let script = "redis.call('set', ARGV[1], 'x'); redis.call('set', ARGV[2], 'y'); \
                  redis.call('incrby', ARGV[3], 5); return redis.call('mget', ARGV[1], ARGV[2], ARGV[3])";
    assert_eq!(
        t.run(&["EVAL", script, "0", &b, &c, &d]),
        "*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\n5\r\n"
    );
    assert_eq!(
        t.run(&["MGET", &b, &c, &d]),
        "*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\n5\r\n"
    );
    // A write on copies, then a key not held: the copies are dropped and
    // the script runs once more (each INCR happens once).
    t.run(&["SET", &c, "10"]);
    let script = "redis.call('incr', KEYS[1]); redis.call('incr', KEYS[2]); \
                  return redis.call('incr', ARGV[1])";
    t.run(&["SET", &b, "0"]);
    assert_eq!(t.run(&["EVAL", script, "2", &a, &b, &c]), ":11\r\n");
    assert_eq!(
        t.run(&["MGET", &a, &b, &c]),
        "*3\r\n$1\r\n1\r\n$1\r\n1\r\n$2\r\n11\r\n"
    );
    // A pcall that catches the abandoned run's error cannot go on: every
    // later call raises too, and the run that counts is the wider one.
    let script = "local ok = pcall(redis.call, 'get', ARGV[1]); \
                  local ok2, e = pcall(redis.call, 'set', KEYS[1], 'w'); \
                  return {tostring(ok), tostring(ok2), redis.call('get', KEYS[1])}";
    assert_eq!(
        t.run(&["EVAL", script, "1", &a, &b]),
        "*3\r\n$4\r\ntrue\r\n$4\r\ntrue\r\n$1\r\nw\r\n"
    );
    // Functions too.
    assert!(t
        .run(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=mv\nredis.register_function('mv', function(keys, args) \
             local v = redis.call('get', args[1]); redis.call('set', args[2], v); return v end)"
        ])
        .starts_with("$2"));
    assert_eq!(t.run(&["FCALL", "mv", "0", &c, &d]), "$2\r\n11\r\n");
    assert_eq!(t.run(&["GET", &d]), "$2\r\n11\r\n");
    // Inside MULTI the other commands already ran: still refused.
    t.run(&["MULTI"]);
    t.run(&["EVAL", "return redis.call('get', ARGV[1])", "1", &a, &b]);
    let r = t.run(&["EXEC"]);
    assert!(r.contains("not declared"), "{r}");
    // After a write on the script's own shard (first run): the write is
    // taken back and the script runs again (it happens once).
    t.run(&["SET", &a, "5"]);
    t.run(&["SET", &b, "bee"]);
    let r = t.run(&[
        "EVAL",
        "redis.call('incr', KEYS[1]); return {redis.call('get', KEYS[1]), redis.call('get', ARGV[1])}",
        "1",
        &a,
        &b,
    ]);
    assert_eq!(r, "*2\r\n$1\r\n6\r\n$3\r\nbee\r\n");
    // Its effects are logged once: the INCR (as a run on copies logs it).
    t.recording(true);
    t.take_records();
    t.run(&[
        "EVAL",
        "redis.call('incr', KEYS[1]); return redis.call('get', ARGV[1])",
        "1",
        &a,
        &b,
    ]);
    let recs = t.take_records();
    assert_eq!(
        recs.iter()
            .filter(|r| r[0].eq_ignore_ascii_case("incr"))
            .count(),
        1,
        "{recs:?}"
    );
    assert_eq!(t.run(&["GET", &a]), "$1\r\n7\r\n");
    // A MOVE (a key of another database) is not taken back: a key found
    // after it is refused.
    let r = t.run(&[
        "EVAL",
        "redis.call('move', KEYS[1], 3); return redis.call('get', ARGV[1])",
        "1",
        &a,
        &b,
    ]);
    assert!(r.contains("not declared"), "{r}");
}

#[test]
fn moving_counters_between_undeclared_keys_keeps_the_sum() {
    let n = 16;
    let mut t = TestServer::new(n);
    let keys: Vec<String> = (0..8).map(|i| format!("ctr{i}")).collect();
    for k in &keys {
        t.run(&["SET", k, "100"]);
    }
    let script = "local v = tonumber(redis.call('get', ARGV[1])); \
                  redis.call('decrby', ARGV[1], ARGV[3]); redis.call('incrby', ARGV[2], ARGV[3]); return v";
    for i in 0..64 {
        let (x, y) = (&keys[i % 8], &keys[(i * 3 + 1) % 8]);
        t.run(&["EVAL", script, "0", x, y, "7"]);
    }
    let sum: i64 = keys
        .iter()
        .map(|k| {
            let r = t.run(&["GET", k]);
            r.lines().nth(1).unwrap().parse::<i64>().unwrap()
        })
        .sum();
    assert_eq!(sum, 800);
}

/// A call a script may not make (read-only script, NOSCRIPT command, over
/// maxmemory) counts in its command's rejected_calls and in errorstats, as
/// Redis's scriptCall errors do, once (the script replying the error does
/// not count it again), also in a thread's first script (whose statistics
/// are not lent: `ThreadStats::absorb` drains rejections too).
#[test]
fn refused_script_calls_count_as_rejected() {
    let mut t = TestServer::new(1);
    for _ in 0..2 {
        t.run(&["EVAL_RO", "return redis.pcall('set', KEYS[1], 1)", "1", "x"]);
        t.run(&["EVAL", "return redis.pcall('multi')", "0"]);
    }
    let r = t.run(&["INFO", "commandstats"]);
    for want in [
        "\r\ncmdstat_set:calls=0,usec=0,usec_per_call=0.00,rejected_calls=2,failed_calls=0\r\n",
        "\r\ncmdstat_multi:calls=0,usec=0,usec_per_call=0.00,rejected_calls=2,failed_calls=0\r\n",
    ] {
        assert!(r.contains(want), "{want} in {r}");
    }
    let r = t.run(&["INFO", "errorstats"]);
    assert!(r.contains("\r\nerrorstat_ERR:count=4\r\n"), "{r}");
}
