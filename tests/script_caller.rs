//! What a script sees of its own caller (issue 23): SLOWLOG GET's entries
//! of the caller's commands carry its address and name, and MEMORY STATS
//! counts its buffers in `clients.normal`, as the same commands sent
//! directly by that client show them, whichever shard the caller's
//! commands and its script ran on. (While its script runs on its own
//! thread, inline, in place or by a call to a co-hosted shard, the
//! caller's connection is out of its slot, in no loop's table: the run is
//! lent it, `commands::Sender`. Before, those entries had an empty address
//! and name and its buffers were not counted.)
//!
//! The same expectations are Redis's; validate against it:
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test script_caller`.

mod common;

use common::{reply_payload, split_aggregate, Layout, RawConn, Server};

/// The server in `layout` (its shards on one thread once consolidated, so
/// that scripts run in place or by a call from the caller's loop), a key
/// on each shard, and a client named `caller` whose home is shard 0.
fn start(layout: Layout) -> (Server, Vec<String>, RawConn) {
    let srv = layout.tessera(&[]);
    if layout.consolidated && !common::testing_real_redis() {
        common::wait_shard_threads(&srv, 1);
    }
    let keys = common::keys_across_shards("k:", layout.shards, layout.shards);
    let mut c = common::connection_on(&srv, &keys[0]);
    assert_eq!(c.cmd_str(&["CLIENT", "SETNAME", "caller"]), b"+OK\r\n");
    (srv, keys, c)
}

/// The declared keys of the scripts tried: none (the caller's home shard),
/// its home shard's key, another shard's, the last shard's, and two of
/// different shards, neither the caller's.
fn script_keys(keys: &[String]) -> Vec<Vec<&str>> {
    let n = keys.len();
    let two = if n > 2 {
        vec![keys[1].as_str(), keys[2].as_str()]
    } else {
        vec![keys[1].as_str(), keys[0].as_str()]
    };
    vec![
        vec![],
        vec![&keys[0]],
        vec![&keys[1]],
        vec![&keys[n - 1]],
        two,
    ]
}

/// `addr=` of CLIENT INFO.
fn addr_of(c: &mut RawConn) -> String {
    let info = reply_payload(&c.cmd_str(&["CLIENT", "INFO"])).expect("client info");
    let info = String::from_utf8(info).expect("utf8");
    info.split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .expect("addr=")
        .to_string()
}

/// EVAL of `script` declaring `keys`: its reply, raw.
fn eval(c: &mut RawConn, script: &str, keys: &[&str]) -> Vec<u8> {
    let n = keys.len().to_string();
    let mut args = vec!["EVAL", script, &n];
    args.extend_from_slice(keys);
    c.cmd_str(&args)
}

/// Each SET entry of SLOWLOG GET as `address name`.
const SET_LABELS: &str = "local out = {} \
    for _, e in ipairs(redis.call('slowlog', 'get', -1)) do \
    if e[4][1] == 'SET' then table.insert(out, e[5] .. ' ' .. e[6]) end end \
    return out";

fn slowlog_names_the_callers_entries(layout: Layout) {
    let (srv, keys, mut c) = start(layout);
    let mut other = srv.raw();
    assert_eq!(other.cmd_str(&["CLIENT", "SETNAME", "other"]), b"+OK\r\n");
    let (me, them) = (addr_of(&mut c), addr_of(&mut other));
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        b"+OK\r\n"
    );
    let mut want: Vec<String> = Vec::new();
    want.extend(keys.iter().map(|_| format!("{me} caller")));
    want.extend(keys.iter().map(|_| format!("{them} other")));
    want.sort();
    for declared in script_keys(&keys) {
        assert_eq!(c.cmd_str(&["SLOWLOG", "RESET"]), b"+OK\r\n");
        // Each on its key's shard: every one but the first on another
        // than the caller's.
        for k in &keys {
            assert_eq!(c.cmd_str(&["SET", k, "1"]), b"+OK\r\n");
            assert_eq!(other.cmd_str(&["SET", k, "2"]), b"+OK\r\n");
        }
        let reply = eval(&mut c, SET_LABELS, &declared);
        let (_, items) = split_aggregate(&reply)
            .unwrap_or_else(|| panic!("{layout} {declared:?}: {}", common::escape(&reply, 300)));
        let mut got: Vec<String> = items
            .iter()
            .map(|i| String::from_utf8(reply_payload(i).expect("bulk")).expect("utf8"))
            .collect();
        got.sort();
        assert_eq!(got, want, "{layout}, keys {declared:?}");
    }
}

/// `clients.normal` of MEMORY STATS, from a script declaring `keys` or
/// (`None`) sent directly.
fn clients_normal(c: &mut RawConn, keys: Option<&[&str]>) -> i64 {
    let reply = match keys {
        Some(keys) => eval(
            c,
            "local s = redis.call('memory', 'stats') \
             for i = 1, #s, 2 do if s[i] == 'clients.normal' then return s[i + 1] end end",
            keys,
        ),
        None => {
            let reply = c.cmd_str(&["MEMORY", "STATS"]);
            let (_, items) = split_aggregate(&reply).expect("memory stats");
            let at = items
                .iter()
                .position(|i| reply_payload(i).as_deref() == Some(b"clients.normal"))
                .expect("clients.normal");
            items[at + 1].clone()
        }
    };
    let text = reply_payload(&reply).unwrap_or_else(|| panic!("{}", common::escape(&reply, 300)));
    String::from_utf8(text)
        .expect("utf8")
        .parse()
        .expect("an integer")
}

fn memory_stats_counts_the_caller(layout: Layout) {
    let (_srv, keys, mut c) = start(layout);
    // The caller alone (the connections `start` tried are gone), and
    // counted (Redis: by its clients cron).
    common::wait_for("the caller alone", || {
        reply_payload(&c.cmd_str(&["CLIENT", "LIST"]))
            .is_some_and(|l| l.iter().filter(|&&b| b == b'\n').count() == 1)
            && clients_normal(&mut c, None) > 0
    });
    for declared in script_keys(&keys) {
        let direct = clients_normal(&mut c, None);
        let scripted = clients_normal(&mut c, Some(&declared));
        // The same client's buffers (Tessera reads them live: a reply
        // more or less grown differs by a little, far less than a
        // client's 16 KB or more).
        assert!(
            scripted > direct / 2 && scripted < direct * 3 / 2,
            "{layout}, keys {declared:?}: direct {direct}, from a script {scripted}"
        );
    }
}

per_layout!(
    slowlog_names_the_callers_entries,
    memory_stats_counts_the_caller
);
