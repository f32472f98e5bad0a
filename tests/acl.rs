//! ACL (issue 26.2) against the real binary: a restricted user is refused
//! outside its commands, keys and channels (also inside scripts) and each
//! refusal is an ACL LOG entry with Redis's fields; DELUSER and ACL LOAD
//! close the connections of the users they remove, on every thread; the
//! ACL file survives a SAVE / LOAD round trip and is read at start;
//! `user` lines in the configuration. Byte-exact replies are in
//! `tests/diff/acl.txt`; redis-py's AUTH in `tests/clients.rs`.
//!
//! Servers run four shards on separate threads (the refusal and script
//! tests: each layout of [`common::LAYOUTS`]), so the connections of one
//! user sit on several threads.

mod common;

use std::time::Duration;

use common::{testing_real_redis, unique_temp_dir, Layout, RawConn, Server};

fn server(extra: &[&str]) -> Server {
    if testing_real_redis() {
        return Server::tessera(extra);
    }
    let mut args = vec!["--shards", "4", "--shard-consolidation", "no"];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// The fields of the newest ACL LOG entry, as (name, value) text pairs
/// (RESP2: a flat array of bulk strings and integers).
fn newest_log_entry(c: &mut RawConn) -> Vec<(String, String)> {
    let reply = text(&c.cmd_str(&["ACL", "LOG", "1"]));
    let mut lines = reply.split("\r\n").filter(|l| !l.is_empty());
    assert_eq!(lines.next(), Some("*1"), "{reply}");
    assert_eq!(lines.next(), Some("*14"), "{reply}");
    let mut values = Vec::new();
    while let Some(l) = lines.next() {
        if let Some(n) = l.strip_prefix(':') {
            values.push(n.to_string());
        } else if l.starts_with('$') {
            values.push(lines.next().unwrap_or_default().to_string());
        }
    }
    values
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv.get(1).cloned().unwrap_or_default()))
        .collect()
}

fn field<'a>(entry: &'a [(String, String)], name: &str) -> &'a str {
    entry
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {entry:?}"))
}

fn restricted(admin: &mut RawConn, srv: &Server) -> RawConn {
    let ok = admin.cmd_str(&[
        "ACL", "SETUSER", "r", "on", ">pw", "~a*", "%R~r*", "&ch*", "+get", "+set", "+publish",
        "+eval", "+multi", "+exec",
    ]);
    assert_eq!(ok, b"+OK\r\n");
    let mut c = srv.raw();
    assert_eq!(c.cmd_str(&["AUTH", "r", "pw"]), b"+OK\r\n");
    c
}

fn refusals_are_noperm_and_logged(layout: Layout) {
    let srv = layout.tessera(&[]);
    let mut admin = srv.raw();
    let mut c = restricted(&mut admin, &srv);
    assert_eq!(c.cmd_str(&["SET", "a1", "v"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["GET", "r1"]), b"$-1\r\n");
    assert_eq!(
        c.cmd_str(&["SET", "r1", "v"]),
        b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    let e = newest_log_entry(&mut admin);
    assert_eq!(field(&e, "count"), "1");
    assert_eq!(field(&e, "reason"), "key");
    assert_eq!(field(&e, "context"), "toplevel");
    assert_eq!(field(&e, "object"), "r1");
    assert_eq!(field(&e, "username"), "r");
    assert!(field(&e, "age-seconds").parse::<f64>().is_ok());
    assert!(
        field(&e, "client-info").contains(" cmd=set user=r "),
        "{e:?}"
    );

    assert_eq!(
        c.cmd_str(&["HGET", "a1", "f"]),
        b"-NOPERM this user has no permissions to run the 'hget' command\r\n"
    );
    let e = newest_log_entry(&mut admin);
    assert_eq!(
        (field(&e, "reason"), field(&e, "object")),
        ("command", "hget")
    );
    assert_eq!(
        c.cmd_str(&["PUBLISH", "other", "m"]),
        b"-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
    );
    let e = newest_log_entry(&mut admin);
    assert_eq!(
        (field(&e, "reason"), field(&e, "object")),
        ("channel", "other")
    );

    // The same refusal again within a minute bumps the entry's count.
    c.cmd_str(&["PUBLISH", "other", "m"]);
    assert_eq!(field(&newest_log_entry(&mut admin), "count"), "2");

    // Inside MULTI: refused when queued (context multi), EXEC aborts.
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    c.cmd_str(&["GET", "b"]);
    assert_eq!(field(&newest_log_entry(&mut admin), "context"), "multi");
    assert!(text(&c.cmd_str(&["EXEC"])).starts_with("-EXECABORT"));

    // Rules changed between queueing and EXEC.
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["GET", "a1"]), b"+QUEUED\r\n");
    admin.cmd_str(&["ACL", "SETUSER", "r", "-get"]);
    assert_eq!(
        text(&c.cmd_str(&["EXEC"])),
        "*1\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated \
         and the EXEC call. This command is no longer allowed for the following reason: no \
         permission to execute the command or subcommand\r\n"
    );
    admin.cmd_str(&["ACL", "SETUSER", "r", "+get"]);

    // Wrong passwords are logged with reason auth.
    let mut other = srv.raw();
    assert!(text(&other.cmd_str(&["AUTH", "r", "bad"])).starts_with("-WRONGPASS"));
    let e = newest_log_entry(&mut admin);
    assert_eq!(
        (
            field(&e, "reason"),
            field(&e, "object"),
            field(&e, "username")
        ),
        ("auth", "AUTH", "r")
    );
}

fn scripts_run_as_their_caller(layout: Layout) {
    let srv = layout.tessera(&[]);
    let mut admin = srv.raw();
    let mut c = restricted(&mut admin, &srv);
    let err = text(&c.cmd_str(&["EVAL", "return redis.call('get','b')", "0"]));
    assert!(
        err.starts_with(
            "-ERR The user executing the script can't access at least one of the keys mentioned \
             in the command arguments"
        ),
        "{err}"
    );
    let e = newest_log_entry(&mut admin);
    assert_eq!(
        (
            field(&e, "reason"),
            field(&e, "context"),
            field(&e, "object")
        ),
        ("key", "lua", "b")
    );
    let err = text(&c.cmd_str(&["EVAL", "return redis.call('hget','a','f')", "0"]));
    assert!(
        err.starts_with("-ERR The user executing the script can't run this command or subcommand"),
        "{err}"
    );
    // Keys declared (Tessera refuses an undeclared key of another shard).
    assert_eq!(
        c.cmd_str(&["EVAL", "return redis.call('get',KEYS[1])", "1", "a1"]),
        b"$-1\r\n"
    );
    // The default user's scripts are not restricted.
    assert_eq!(
        admin.cmd_str(&["EVAL", "return redis.call('hget',KEYS[1],'f')", "1", "a"]),
        b"$-1\r\n"
    );
}

#[test]
fn deluser_and_load_close_the_users_connections() {
    let dir = unique_temp_dir("acl");
    let path = dir.join("users.acl");
    std::fs::write(&path, "").expect("write the ACL file");
    let path = path.display().to_string();
    let srv = server(&["--aclfile", &path]);
    let mut admin = srv.raw();
    assert_eq!(
        admin.cmd_str(&["ACL", "SETUSER", "k", "on", ">pw", "+@all", "~*"]),
        b"+OK\r\n"
    );
    // Several connections: with four threads they land on several.
    let mut conns: Vec<RawConn> = (0..6).map(|_| srv.raw()).collect();
    for c in &mut conns {
        assert_eq!(c.cmd_str(&["AUTH", "k", "pw"]), b"+OK\r\n");
        assert_eq!(c.cmd_str(&["ACL", "WHOAMI"]), b"$1\r\nk\r\n");
    }
    assert_eq!(admin.cmd_str(&["ACL", "DELUSER", "k"]), b":1\r\n");
    for c in &mut conns {
        c.wait_closed(Duration::from_secs(5))
            .expect("a deleted user's connection is closed");
    }
    assert_eq!(admin.cmd_str(&["PING"]), b"+PONG\r\n");
    // A user deleting itself gets the reply, then the connection closes.
    admin.cmd_str(&["ACL", "SETUSER", "k", "on", ">pw", "+@all", "~*"]);
    let mut me = srv.raw();
    assert_eq!(me.cmd_str(&["AUTH", "k", "pw"]), b"+OK\r\n");
    assert_eq!(me.cmd_str(&["ACL", "DELUSER", "k"]), b":1\r\n");
    me.wait_closed(Duration::from_secs(5))
        .expect("closed after its reply");

    // SAVE / LOAD round trip through the file.
    admin.cmd_str(&[
        "ACL",
        "SETUSER",
        "s",
        "on",
        ">pw",
        "~s*",
        "+get",
        "(+set ~t*)",
    ]);
    let list = admin.cmd_str(&["ACL", "LIST"]);
    assert_eq!(admin.cmd_str(&["ACL", "SAVE"]), b"+OK\r\n");
    let saved = std::fs::read_to_string(&path).expect("read the ACL file");
    assert!(saved.contains("user s on #"), "{saved}");
    let mut s = srv.raw();
    assert_eq!(s.cmd_str(&["AUTH", "s", "pw"]), b"+OK\r\n");
    admin.cmd_str(&["ACL", "DELUSER", "s"]);
    s.wait_closed(Duration::from_secs(5)).expect("closed");
    assert_eq!(admin.cmd_str(&["ACL", "LOAD"]), b"+OK\r\n");
    assert_eq!(admin.cmd_str(&["ACL", "LIST"]), list);
    // LOAD replaces every user: their connections close.
    let mut s = srv.raw();
    assert_eq!(s.cmd_str(&["AUTH", "s", "pw"]), b"+OK\r\n");
    assert_eq!(admin.cmd_str(&["ACL", "LOAD"]), b"+OK\r\n");
    s.wait_closed(Duration::from_secs(5))
        .expect("closed by LOAD");
    // A bad file changes nothing.
    std::fs::write(&path, "user x on +nosuch\n").expect("write");
    let err = text(&admin.cmd_str(&["ACL", "LOAD"]));
    assert!(
        err.ends_with(
            ": Unknown command or category name in ACL. WARNING: ACL errors detected, no change \
             to the previously active ACL rules was performed\r\n"
        ),
        "{err}"
    );
    assert_eq!(admin.cmd_str(&["ACL", "LIST"]), list);
    drop(srv);

    // The file is read at start.
    std::fs::write(&path, saved).expect("write");
    let srv = server(&["--aclfile", &path]);
    let mut c = srv.raw();
    assert_eq!(c.cmd_str(&["AUTH", "s", "pw"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["SET", "t1", "v"]), b"+OK\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// ACL SETUSER that takes channel permissions away closes the user's
/// subscribers that lose a subscription before it replies, and only those
/// (Redis's ACLKillPubsubClientsIfNeeded; Tcl unit/acl 'Subscribers are
/// killed when revoked of channel permission').
#[test]
fn setuser_revoking_channels_closes_the_subscribers_that_lose_one() {
    let srv = server(&[]);
    let mut admin = srv.raw();
    assert_eq!(
        admin.cmd_str(&[
            "ACL",
            "SETUSER",
            "ps",
            "on",
            ">pw",
            "+@all",
            "resetchannels",
            "&foo:1",
            "&bar:*",
            "&keep"
        ]),
        b"+OK\r\n"
    );
    let sub = |name: &str, cmd: &[&str]| {
        let mut c = srv.raw();
        assert_eq!(c.cmd_str(&["AUTH", "ps", "pw"]), b"+OK\r\n");
        assert_eq!(c.cmd_str(&["CLIENT", "SETNAME", name]), b"+OK\r\n");
        let r = text(&c.cmd_str(cmd));
        assert!(r.starts_with("*3\r\n"), "{r}");
        c
    };
    let mut chan = sub("chan", &["SUBSCRIBE", "foo:1"]);
    let mut shard = sub("shard", &["SSUBSCRIBE", "foo:1"]);
    let mut pat = sub("pat", &["PSUBSCRIBE", "bar:*"]);
    let kept = sub("kept", &["SUBSCRIBE", "keep"]);
    let mut plain = srv.raw();
    assert_eq!(plain.cmd_str(&["AUTH", "ps", "pw"]), b"+OK\r\n");
    assert_eq!(plain.cmd_str(&["CLIENT", "SETNAME", "plain"]), b"+OK\r\n");

    // A superset of the old patterns closes nothing.
    assert_eq!(
        admin.cmd_str(&["ACL", "SETUSER", "ps", "&more"]),
        b"+OK\r\n"
    );
    let list = text(&admin.cmd_str(&["CLIENT", "LIST"]));
    for name in ["chan", "shard", "pat", "kept", "plain"] {
        assert!(list.contains(&format!(" name={name} ")), "{list}");
    }
    // `bar:1` is not the pattern `bar:*`: the pattern subscriber goes too.
    assert_eq!(
        admin.cmd_str(&["ACL", "SETUSER", "ps", "resetchannels", "&keep", "&bar:1"]),
        b"+OK\r\n"
    );
    let list = text(&admin.cmd_str(&["CLIENT", "LIST"]));
    for name in ["chan", "shard", "pat"] {
        assert!(!list.contains(&format!(" name={name} ")), "{list}");
    }
    for name in ["kept", "plain"] {
        assert!(list.contains(&format!(" name={name} ")), "{list}");
    }
    for c in [&mut chan, &mut shard, &mut pat] {
        c.wait_closed(Duration::from_secs(5))
            .expect("a subscriber that lost its channel is closed");
    }
    assert_eq!(plain.cmd_str(&["PING"]), b"+PONG\r\n");
    // The default user's subscribers, authenticated or not.
    let mut anon = srv.raw();
    assert_eq!(anon.cmd_str(&["SUBSCRIBE", "x"]).len(), 30);
    assert_eq!(
        admin.cmd_str(&["ACL", "SETUSER", "default", "resetchannels"]),
        b"+OK\r\n"
    );
    anon.wait_closed(Duration::from_secs(5))
        .expect("the default user's subscriber is closed");
    assert_eq!(admin.cmd_str(&["PING"]), b"+PONG\r\n");
    drop(kept);
}

/// A relative `aclfile` lives in `dir`, where Redis has moved its working
/// directory (Tcl unit/acl-v2 starts a server so); ACL SAVE and LOAD use
/// it there too.
#[test]
fn a_relative_aclfile_is_in_dir() {
    let dir = unique_temp_dir("acl-rel");
    std::fs::write(dir.join("rel.acl"), "user alice on nopass ~* +@all\n").expect("write");
    let d = dir.display().to_string();
    let srv = server(&["--dir", &d, "--aclfile", "rel.acl"]);
    let mut c = srv.raw();
    assert_eq!(c.cmd_str(&["AUTH", "alice", "x"]), b"+OK\r\n");
    assert_eq!(
        c.cmd_str(&["ACL", "SETUSER", "bob", "on", "nopass"]),
        b"+OK\r\n"
    );
    assert_eq!(c.cmd_str(&["ACL", "SAVE"]), b"+OK\r\n");
    let saved = std::fs::read_to_string(dir.join("rel.acl")).expect("read");
    assert!(saved.contains("user bob on"), "{saved}");
    assert_eq!(c.cmd_str(&["ACL", "LOAD"]), b"+OK\r\n");
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn user_lines_in_the_configuration() {
    let srv = server(&["--user", "alice", "on", ">a", "~x*", "+get"]);
    // Set after start: the harness checks a new server with a bare PING.
    assert_eq!(
        srv.raw()
            .cmd_str(&["CONFIG", "SET", "requirepass", "rootpw"]),
        b"+OK\r\n"
    );
    let mut c = srv.raw();
    assert_eq!(
        c.cmd_str(&["GET", "x"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.cmd_str(&["AUTH", "alice", "a"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["GET", "x1"]), b"$-1\r\n");
    assert_eq!(
        c.cmd_str(&["GET", "y"]),
        b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    let mut d = srv.raw();
    assert_eq!(d.cmd_str(&["AUTH", "rootpw"]), b"+OK\r\n");
    assert_eq!(d.cmd_str(&["ACL", "WHOAMI"]), b"$7\r\ndefault\r\n");
}

per_layout!(refusals_are_noperm_and_logged, scripts_run_as_their_caller,);
