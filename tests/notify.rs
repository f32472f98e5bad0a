//! Keyspace notifications (issue 22.4) where a byte-for-byte script cannot
//! reach: `expired` from active expiry (no client touches the keys),
//! `evicted` under `maxmemory`, and multi-key commands whose keys live on
//! different shards (in each layout of [`common::LAYOUTS`]: 2 and 16 shards,
//! consolidated and not), compared with a real
//! redis-server as the *set* of events each command emits (across shards
//! Tessera may publish one shard's events before another's). Blocked
//! clients served by a later push are among them. Byte-exact events with
//! their order are in `tests/diff/notify.txt`.
//!
//! Every read has the harness's deadline; loops are bounded by counts.

mod common;

use std::time::{Duration, Instant};

use common::{
    info_field, redis_available, reply_payload, split_aggregate, Layout, RawConn, Server,
};

/// The channel a step's marker is published on: everything the listener
/// got before it belongs to the step.
const MARKER: &str = "__keyspace@0__:~marker~";

/// Tessera in `layout` (every test runs in each of [`common::LAYOUTS`]).
fn server(layout: Layout) -> Server {
    layout.tessera(&[])
}

/// A connection listening on every keyspace and keyevent channel.
struct Listener(RawConn);

impl Listener {
    fn new(s: &Server) -> Listener {
        let mut c = s.raw();
        let r = c.cmd_str(&["PSUBSCRIBE", "__key*__:*"]);
        assert!(r.starts_with(b"*3\r\n$10\r\npsubscribe"), "{r:?}");
        Listener(c)
    }

    /// The next message's channel and payload.
    fn next(&mut self) -> (String, String) {
        let r = self.0.read_reply();
        let (_, parts) = split_aggregate(&r).expect("a pmessage");
        assert_eq!(parts.len(), 4, "{:?}", String::from_utf8_lossy(&r));
        let text =
            |p: &[u8]| String::from_utf8_lossy(&reply_payload(p).expect("bulk")).into_owned();
        assert_eq!(text(&parts[0]), "pmessage");
        (text(&parts[2]), text(&parts[3]))
    }
}

fn set_events(s: &Server, flags: &str) {
    let mut c = s.raw();
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "notify-keyspace-events", flags]),
        b"+OK\r\n"
    );
}

/// A key with a short TTL that nobody reads again is deleted by active
/// expiry, and a listener sees `expired` for it, on every shard.
fn expired_from_active_expiry(layout: Layout) {
    let s = server(layout);
    set_events(&s, "Ex");
    let mut l = Listener::new(&s);
    let keys = common::keys_across_shards("exp", layout.shards, layout.shards);
    let mut c = s.raw();
    for k in &keys {
        assert_eq!(c.cmd_str(&["SET", k, "v", "PX", "50"]), b"+OK\r\n");
    }
    // Only the listener reads from now on: each key expires by itself.
    let mut got: Vec<(String, String)> = (0..keys.len()).map(|_| l.next()).collect();
    got.sort();
    let mut want: Vec<(String, String)> = keys
        .iter()
        .map(|k| ("__keyevent@0__:expired".to_string(), k.clone()))
        .collect();
    want.sort();
    assert_eq!(got, want);
    // The keys are gone (DBSIZE counts keys expired but not deleted).
    assert_eq!(c.cmd_str(&["DBSIZE"]), b":0\r\n");
}

/// Keys evicted under `maxmemory` each get one `evicted` event, and every
/// event names a key that is gone.
fn evicted_under_maxmemory(layout: Layout) {
    const KEYS: usize = 2000;
    const VALUE: usize = 1000;
    let s = server(layout);
    set_events(&s, "Ee");
    let mut l = Listener::new(&s);
    let mut c = s.conn();
    let v = "x".repeat(VALUE);
    let mut p = redis::pipe();
    for i in 0..KEYS {
        p.cmd("SET").arg(format!("ev{i}")).arg(&v).ignore();
    }
    p.query::<()>(&mut c).unwrap();
    let used: u64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
    let limit = used - (KEYS * VALUE / 2) as u64;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-random")
        .query::<()>(&mut c)
        .unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query::<()>(&mut c)
        .unwrap();
    // The shards evict by themselves; a write also evicts first.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let used: u64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
        if used <= limit {
            break;
        }
        assert!(Instant::now() < deadline, "never got under {limit}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stop evicting, then match events and missing keys one for one.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query::<()>(&mut c)
        .unwrap();
    let missing = |c: &mut redis::Connection| -> Vec<String> {
        let mut p = redis::pipe();
        for i in 0..KEYS {
            p.cmd("EXISTS").arg(format!("ev{i}"));
        }
        let r: Vec<i64> = p.query(c).unwrap();
        (0..KEYS)
            .filter(|&i| r[i] == 0)
            .map(|i| format!("ev{i}"))
            .collect()
    };
    let gone = missing(&mut c);
    assert!(!gone.is_empty(), "nothing was evicted");
    let mut got: Vec<String> = (0..gone.len())
        .map(|_| {
            let (ch, key) = l.next();
            assert_eq!(ch, "__keyevent@0__:evicted");
            key
        })
        .collect();
    got.sort();
    let mut want = gone;
    want.sort();
    assert_eq!(got, want, "one evicted event per evicted key");
}

/// One side of the comparison: a server, a connection for commands, one
/// for a blocked client, a listener.
struct Side {
    cmd: RawConn,
    blocked: RawConn,
    waiting: bool,
    in_multi: bool,
    listener: Listener,
    _server: Server,
}

impl Side {
    fn new(server: Server) -> Side {
        set_events(&server, "KEAn");
        let listener = Listener::new(&server);
        Side {
            cmd: server.raw(),
            blocked: server.raw(),
            waiting: false,
            in_multi: false,
            listener,
            _server: server,
        }
    }

    /// Sends `args` on the blocked client's connection (its reply comes
    /// with the next step).
    fn block(&mut self, args: &[String]) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.blocked.send(&common::encode_command(&a));
        self.waiting = true;
        // Blocked before the push that serves it is sent.
        for _ in 0..1000 {
            let info = self.cmd.cmd_str(&["INFO", "clients"]);
            if String::from_utf8_lossy(&info).contains("blocked_clients:1\r\n") {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let info = self.cmd.cmd_str(&["INFO", "clients"]);
        panic!(
            "the client never blocked: {args:?} {}",
            String::from_utf8_lossy(&info)
        );
    }

    /// Runs `args`: its reply (and a blocked client's, if one waited), and
    /// the events it caused, sorted.
    fn step(&mut self, args: &[String]) -> (Vec<Vec<u8>>, Vec<(String, String)>) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        let mut replies = vec![self.cmd.cmd(&a)];
        if std::mem::take(&mut self.waiting) {
            replies.push(self.blocked.read_reply());
        }
        let name = args[0].to_ascii_uppercase();
        if name == "MULTI" || (self.in_multi && name != "EXEC") {
            // Queued: nothing runs (and a marker would be queued too).
            self.in_multi = true;
            return (replies, Vec::new());
        }
        self.in_multi = false;
        // Published after every reply above: the step's events come
        // before it.
        self.cmd.cmd_str(&["PUBLISH", MARKER, "m"]);
        let mut events = Vec::new();
        loop {
            let (ch, payload) = self.listener.next();
            if ch == MARKER {
                break;
            }
            events.push((ch, payload));
            assert!(events.len() < 1000, "runaway events");
        }
        events.sort();
        (replies, events)
    }
}

/// Multi-key commands across shards emit the events Redis emits (as a
/// set per command), `new` included, in and out of MULTI, and for
/// blocked clients served by a later push.
fn multi_shard_commands_emit_redis_events(layout: Layout) {
    if !redis_available() {
        eprintln!("SKIPPED multi_shard_commands_emit_redis_events: no redis-server");
        return;
    }
    let k = common::keys_across_shards("k", 3, layout.shards);
    let mut tessera = Side::new(server(layout));
    let mut redis = Side::new(Server::redis(&[]));
    // `%0` `%1` `%2`: keys on shards 0, 1, 2 (0, 1, 0 with 2 shards).
    let script: &[&str] = &[
        "MSET %0 1 %1 2 %2 3",
        "DEL %0 %1 %2 %0",
        "MSETNX %0 1 %1 2",
        "MSETNX %1 x %2 y",
        "RENAME %0 %2",
        "RENAMENX %1 %0",
        "RENAMENX %0 %2",
        "COPY %2 %1",
        "COPY %2 %1 REPLACE",
        "FLUSHALL",
        "SADD %0 a b",
        "SMOVE %0 %1 a",
        "SMOVE %0 %1 b",
        "SMOVE %1 %2 zz",
        "SADD %2 b c",
        "SINTERSTORE %0 %1 %2",
        "SUNIONSTORE %0 %1 %2",
        "SDIFFSTORE %0 %1 %1",
        "SDIFFSTORE %0 %1 %1",
        "FLUSHALL",
        "RPUSH %0 1 2",
        "LMOVE %0 %1 LEFT RIGHT",
        "RPOPLPUSH %0 %2",
        "LMPOP 2 %0 %1 LEFT COUNT 5",
        "BLMPOP 0 2 %0 %2 RIGHT",
        "FLUSHALL",
        "ZADD %0 1 a",
        "ZADD %1 2 b",
        "ZUNIONSTORE %2 2 %0 %1",
        "ZINTERSTORE %2 2 %0 %1",
        "ZRANGESTORE %2 %0 0 -1",
        "ZDIFFSTORE %2 2 %0 %1",
        "BZMPOP 0 2 %2 %1 MIN COUNT 5",
        "FLUSHALL",
        "RPUSH %0 3 1 2",
        "SORT %0 STORE %1",
        "SORT %2 STORE %1",
        "SETBIT %0 1 1",
        "BITOP OR %1 %0 %2",
        "BITOP AND %1 %0 %2",
        "PFADD %2 a",
        "PFMERGE %1 %0 %2",
        "FLUSHALL",
        "MULTI",
        "SET %0 1",
        "SADD %1 x",
        "SMOVE %1 %2 x",
        "LPUSH %0 y",
        "EXEC",
        "FLUSHALL",
        // A blocked client served by a push (`!`: sent on its own
        // connection, answered with the next step).
        "!BLPOP %0 %1 0",
        "RPUSH %1 a b",
        "!BLMOVE %0 %2 LEFT LEFT 0",
        "RPUSH %0 c",
        "FLUSHALL",
        "!BZPOPMIN %2 %1 0",
        "ZADD %1 1 m",
    ];
    for line in script {
        let (blocked, line) = match line.strip_prefix('!') {
            Some(l) => (true, l),
            None => (false, *line),
        };
        let args: Vec<String> = line
            .split(' ')
            .map(|a| match a {
                "%0" => k[0].clone(),
                "%1" => k[1].clone(),
                "%2" => k[2].clone(),
                a => a.to_string(),
            })
            .collect();
        if blocked {
            tessera.block(&args);
            redis.block(&args);
            continue;
        }
        let t = tessera.step(&args);
        let r = redis.step(&args);
        assert_eq!(t, r, "{line} (keys {k:?}): tessera, then redis");
    }
}

/// Shards build events only while some subscription could hear them
/// (`engine::Shard::event_listeners`): each subscription that could (a
/// keyevent channel, a keyspace pattern, `*`) hears every write made after
/// its SUBSCRIBE reply, on every shard, exactly once, as subscriptions
/// come and go; a channel or pattern that cannot hear them does not open
/// the gate and gets nothing.
fn events_only_while_someone_listens(layout: Layout) {
    let s = server(layout);
    set_events(&s, "KEA");
    let keys = common::keys_across_shards("gate", layout.shards, layout.shards);
    let mut w = s.raw();
    let mut other = s.raw();
    other.cmd_str(&["PSUBSCRIBE", "news.*"]);
    other.cmd_str(&["SUBSCRIBE", "__keyspace"]);
    for (round, sub) in [
        (1, ["SUBSCRIBE", "__keyevent@0__:set"]),
        (2, ["PSUBSCRIBE", "__keyspace@0__:gate*"]),
        (3, ["PSUBSCRIBE", "*"]),
    ] {
        let mut l = s.raw();
        let r = l.cmd_str(&sub);
        assert!(r.starts_with(b"*3\r\n"), "{r:?}");
        for k in &keys {
            assert_eq!(w.cmd_str(&["SET", k, "v"]), b"+OK\r\n");
        }
        let mut want: Vec<(String, String)> = Vec::new();
        for k in &keys {
            if round != 2 {
                want.push(("__keyevent@0__:set".into(), k.clone()));
            }
            if round != 1 {
                want.push((format!("__keyspace@0__:{k}"), "set".into()));
            }
        }
        let mut got: Vec<(String, String)> = (0..want.len())
            .map(|_| {
                let m = l.read_reply();
                let (_, parts) = split_aggregate(&m).expect("a message");
                let text = |p: &[u8]| {
                    String::from_utf8_lossy(&reply_payload(p).expect("bulk")).into_owned()
                };
                let n = parts.len();
                (text(&parts[n - 2]), text(&parts[n - 1]))
            })
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "round {round}");
        // Nothing more (PING's reply comes next).
        assert_eq!(l.cmd_str(&["PING"]), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    }
    assert_eq!(other.cmd_str(&["PING"]), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
}

per_layout!(
    events_only_while_someone_listens,
    expired_from_active_expiry,
    evicted_under_maxmemory,
    multi_shard_commands_emit_redis_events,
);
