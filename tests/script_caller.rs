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

/// EVAL of `script` declaring `keys`, with `arg` as ARGV[1]: its reply,
/// raw.
fn eval_with(c: &mut RawConn, script: &str, keys: &[&str], arg: &str) -> Vec<u8> {
    let n = keys.len().to_string();
    let mut args = vec!["EVAL", script, &n];
    args.extend_from_slice(keys);
    args.push(arg);
    c.cmd_str(&args)
}

/// Each SET entry of SLOWLOG GET as `address name`.
const SET_LABELS: &str = "local out = {} \
    for _, e in ipairs(redis.call('slowlog', 'get', -1)) do \
    if e[4][1] == 'SET' then table.insert(out, e[5] .. ' ' .. e[6]) end end \
    return out";

/// Makes a script final before the rest of it: it copies its first key
/// (or, declaring none, a key of the caller's home shard, which it may
/// touch undeclared) to another database, an effect no take-back undoes,
/// so the run is never taken back to run again holding every shard (as
/// one that only reads is, for SLOWLOG GET and MEMORY STATS).
const FINAL: &str = "redis.call('COPY', KEYS[1] or ARGV[1], KEYS[1] or ARGV[1], 'DB', '9') ";

fn slowlog_names_the_callers_entries(layout: Layout) {
    slowlog_labels(layout, "");
}

/// As [`slowlog_names_the_callers_entries`], from scripts that can no
/// longer be taken back: they see every client's entries named, as
/// Redis's do, in every layout (before, only the caller's and those of
/// the connections of the loop the run was on).
fn final_scripts_slowlog_names_every_clients_entries(layout: Layout) {
    slowlog_labels(layout, FINAL);
}

fn slowlog_labels(layout: Layout, prefix: &str) {
    let (srv, keys, mut c) = start(layout);
    let script = format!("{prefix}{SET_LABELS}");
    // A client of another loop than the caller's (the last shard's).
    let mut other = common::connection_on(&srv, &keys[keys.len() - 1]);
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
        let reply = eval_with(&mut c, &script, &declared, &keys[0]);
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

/// `clients.normal` of MEMORY STATS, from a script declaring `keys`
/// (its code after `prefix`, `arg` its ARGV[1]) or (`None`) sent
/// directly.
fn clients_normal(c: &mut RawConn, keys: Option<&[&str]>, prefix: &str, arg: &str) -> i64 {
    let reply = match keys {
        Some(keys) => eval_with(
            c,
            &format!(
                "{prefix}local s = redis.call('memory', 'stats') \
                 for i = 1, #s, 2 do if s[i] == 'clients.normal' then return s[i + 1] end end"
            ),
            keys,
            arg,
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
    memory_stats_of(layout, "", 0);
}

/// As [`memory_stats_counts_the_caller`], from scripts that can no
/// longer be taken back, with three more clients holding 128 KiB each
/// (half of a request, which no buffer shrink takes back, here as in
/// Redis; their homes spread over the loops): every client is counted, as
/// Redis counts them (before, only the caller and the connections of the
/// loop the run was on). The loops a run cannot visit count as of their
/// last cron (Redis's figure is its clients cron's too): the first
/// comparison waits for them.
fn final_scripts_memory_stats_count_every_client(layout: Layout) {
    memory_stats_of(layout, FINAL, 3);
}

fn memory_stats_of(layout: Layout, prefix: &str, more: usize) {
    let (srv, keys, mut c) = start(layout);
    let mut others = Vec::new();
    for i in 0..more {
        let mut o = common::connection_on(&srv, &keys[(i + 1) % keys.len()]);
        let mut half = b"*2\r\n$4\r\nECHO\r\n$262144\r\n".to_vec();
        half.extend(std::iter::repeat_n(b'v', 128 * 1024));
        o.send(&half);
        others.push(o);
    }
    // The caller and those alone (the connections `start` tried are
    // gone), and counted (Redis: by its clients cron).
    common::wait_for("the caller alone", || {
        reply_payload(&c.cmd_str(&["CLIENT", "LIST"]))
            .is_some_and(|l| l.iter().filter(|&&b| b == b'\n').count() == 1 + more)
            && clients_normal(&mut c, None, prefix, &keys[0]) > (more as i64) * 128 * 1024
    });
    let near = |direct: i64, scripted: i64| scripted > direct / 2 && scripted < direct * 3 / 2;
    common::wait_for("every loop's cron", || {
        let direct = clients_normal(&mut c, None, prefix, &keys[0]);
        near(direct, clients_normal(&mut c, Some(&[]), prefix, &keys[0]))
    });
    for declared in script_keys(&keys) {
        let direct = clients_normal(&mut c, None, prefix, &keys[0]);
        let scripted = clients_normal(&mut c, Some(&declared), prefix, &keys[0]);
        // The same client's buffers (Tessera reads them live: a reply
        // more or less grown differs by a little, far less than a
        // client's 16 KB or more).
        assert!(
            near(direct, scripted),
            "{layout}, keys {declared:?}: direct {direct}, from a script {scripted}"
        );
    }
}

/// A field of MEMORY STATS (integer), from a script (`script`: its code
/// declaring `keys`, ARGV[1] `arg`) or sent directly.
fn memory_stat(c: &mut RawConn, script: Option<(&str, &[&str])>, arg: &str, name: &str) -> i64 {
    let reply = match script {
        Some((prefix, keys)) => eval_with(
            c,
            &format!(
                "{prefix}local s = redis.call('memory', 'stats') \
                 for i = 1, #s, 2 do if s[i] == '{name}' then return s[i + 1] end end"
            ),
            keys,
            arg,
        ),
        None => {
            let reply = c.cmd_str(&["MEMORY", "STATS"]);
            let (_, items) = split_aggregate(&reply).expect("memory stats");
            let at = items
                .iter()
                .position(|i| reply_payload(i).as_deref() == Some(name.as_bytes()))
                .unwrap_or_else(|| panic!("no {name}"));
            items[at + 1].clone()
        }
    };
    let text = reply_payload(&reply).unwrap_or_else(|| panic!("{}", common::escape(&reply, 300)));
    String::from_utf8(text)
        .expect("utf8")
        .parse()
        .expect("an integer")
}

/// MEMORY STATS `keys.count` from scripts that can no longer be taken
/// back (so never run again holding every shard): every shard's keys, in
/// every database, as Redis counts the whole server (before, only the
/// script's own shard's). The shards a run cannot read count as of their
/// last cron (a tick at most): the first comparisons wait for every
/// shard's, then they must stay.
fn final_scripts_memory_stats_count_every_shards_keys(layout: Layout) {
    let (_srv, keys, mut c) = start(layout);
    let many = common::keys_across_shards("many:", 5 * layout.shards, layout.shards);
    for k in &many {
        assert_eq!(c.cmd_str(&["SET", k, "v"]), b"+OK\r\n");
    }
    let dbsize = |c: &mut RawConn, db: &str| -> i64 {
        assert_eq!(c.cmd_str(&["SELECT", db]), b"+OK\r\n");
        let r = c.cmd_str(&["DBSIZE"]);
        assert_eq!(c.cmd_str(&["SELECT", "0"]), b"+OK\r\n");
        String::from_utf8_lossy(&r[1..r.len() - 2])
            .parse()
            .expect("dbsize")
    };
    // (The scripts' COPY to database 9 copies a missing key: nothing.)
    let total = |c: &mut RawConn| dbsize(c, "0") + dbsize(c, "9");
    assert_eq!(total(&mut c), many.len() as i64);
    // Until every shard's cron has published its keys: a script reads its
    // own shard live and the others' published figures, so the scripts of
    // every declared set (two home shards at least) see each shard's
    // figure between them. Waiting for the one declaring no key alone
    // never saw the caller's shard's figure, which the next script on
    // another shard could then read from before that shard's last cron
    // (79 keys of 80 at 16 shards).
    common::wait_for("every shard's cron", || {
        let want = total(&mut c);
        script_keys(&keys).iter().all(|declared| {
            memory_stat(&mut c, Some((FINAL, declared)), &keys[0], "keys.count") == want
        })
    });
    for declared in script_keys(&keys) {
        let got = memory_stat(&mut c, Some((FINAL, &declared)), &keys[0], "keys.count");
        let want = total(&mut c);
        assert_eq!(got, want, "{layout}, keys {declared:?}");
        assert_eq!(got, memory_stat(&mut c, None, "", "keys.count"));
    }
}

per_layout!(
    final_scripts_memory_stats_count_every_shards_keys,
    slowlog_names_the_callers_entries,
    memory_stats_counts_the_caller,
    final_scripts_slowlog_names_every_clients_entries,
    final_scripts_memory_stats_count_every_client
);
