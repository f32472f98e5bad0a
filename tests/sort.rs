//! SORT / SORT_RO through the real binary with three shards: STORE into
//! another shard, BY/GET patterns inside the source's hash tag, and the
//! Redis Cluster error for patterns whose keys may live on another shard.

mod common;

use commands::table::shard_of;
use common::Server;

const SHARDS: usize = 3;

fn server() -> Server {
    Server::tessera(&["--shards", "3"])
}

/// A hash tag `{name}` whose keys live on `shard`.
fn tag_on(shard: usize) -> String {
    (0..10_000)
        .map(|n| format!("{{t{n}}}"))
        .find(|t| shard_of(t.as_bytes(), SHARDS) == shard)
        .expect("a tag on every shard")
}

fn q<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{:?}: {e}", args.join(" ")))
}

fn err(con: &mut redis::Connection, args: &[&str]) -> String {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<redis::Value>(con) {
        Ok(v) => panic!("{:?}: expected an error, got {v:?}", args.join(" ")),
        Err(e) => e.to_string(),
    }
}

#[test]
fn store_into_another_shard() {
    let s = server();
    let mut con = s.conn();
    let (a, b) = (tag_on(0), tag_on(2));
    let src = format!("{a}src");
    let dst = format!("{b}dst");
    let _: i64 = q(&mut con, &["RPUSH", &src, "3", "1", "2"]);
    let _: () = q(&mut con, &["SET", &dst, "old"]);
    let n: i64 = q(&mut con, &["SORT", &src, "DESC", "STORE", &dst]);
    assert_eq!(n, 3);
    let got: Vec<String> = q(&mut con, &["LRANGE", &dst, "0", "-1"]);
    assert_eq!(got, ["3", "2", "1"]);
    // With GET patterns in the source's tag, missing values stored as "".
    let w = format!("{a}w_2");
    let _: () = q(&mut con, &["SET", &w, "two"]);
    let pat = format!("{a}w_*");
    let n: i64 = q(
        &mut con,
        &["SORT", &src, "GET", &pat, "GET", "#", "STORE", &dst],
    );
    assert_eq!(n, 6);
    let got: Vec<String> = q(&mut con, &["LRANGE", &dst, "0", "-1"]);
    assert_eq!(got, ["", "1", "two", "2", "", "3"]);
    // An empty result deletes the destination on its shard.
    let none = format!("{a}none");
    let n: i64 = q(&mut con, &["SORT", &none, "STORE", &dst]);
    assert_eq!(n, 0);
    let e: i64 = q(&mut con, &["EXISTS", &dst]);
    assert_eq!(e, 0);
    // An error on the source's shard stores nothing.
    let bad = format!("{a}bad");
    let _: i64 = q(&mut con, &["RPUSH", &bad, "x"]);
    let _: () = q(&mut con, &["SET", &dst, "keep"]);
    assert!(err(&mut con, &["SORT", &bad, "STORE", &dst]).contains("converted into double"));
    let v: String = q(&mut con, &["GET", &dst]);
    assert_eq!(v, "keep");
    // Inside MULTI too.
    let _: () = q(&mut con, &["MULTI"]);
    let _: String = q(&mut con, &["SORT", &src, "STORE", &dst]);
    let _: String = q(&mut con, &["LRANGE", &dst, "0", "-1"]);
    let r: (i64, Vec<String>) = q(&mut con, &["EXEC"]);
    assert_eq!(r, (3, vec!["1".into(), "2".into(), "3".into()]));
}

#[test]
fn patterns_in_the_source_tag_work() {
    let s = server();
    let mut con = s.conn();
    for shard in 0..SHARDS {
        let t = tag_on(shard);
        let src = format!("{t}l");
        let _: i64 = q(&mut con, &["RPUSH", &src, "a", "b", "c"]);
        for (m, w, f) in [("a", "3", "x"), ("b", "1", "y"), ("c", "2", "z")] {
            let _: () = q(&mut con, &["SET", &format!("{t}w_{m}"), w]);
            let _: i64 = q(&mut con, &["HSET", &format!("{t}h_{m}"), "f", f]);
        }
        let by = format!("{t}w_*");
        let get = format!("{t}h_*->f");
        let got: Vec<String> = q(
            &mut con,
            &["SORT", &src, "BY", &by, "GET", "#", "GET", &get],
        );
        assert_eq!(got, ["b", "y", "c", "z", "a", "x"]);
        let got: Vec<String> = q(
            &mut con,
            &["SORT_RO", &src, "BY", &by, "DESC", "LIMIT", "0", "1"],
        );
        assert_eq!(got, ["a"]);
        // BY nosort and GET # need no tag.
        let got: Vec<String> = q(&mut con, &["SORT", &src, "BY", "nosort", "GET", "#"]);
        assert_eq!(got, ["a", "b", "c"]);
    }
}

#[test]
fn patterns_that_may_cross_shards_are_refused() {
    let s = server();
    let mut con = s.conn();
    let (a, b) = (tag_on(0), tag_on(1));
    let src = format!("{a}l");
    let _: i64 = q(&mut con, &["RPUSH", &src, "1", "2"]);
    let by_err = "BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.";
    let get_err = "GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.";
    // No tag: the keys may hash anywhere.
    assert!(err(&mut con, &["SORT", &src, "BY", "w_*"]).contains(by_err));
    assert!(err(&mut con, &["SORT_RO", &src, "GET", "o_*"]).contains(get_err));
    // Another shard's tag, or a `*` inside the tag.
    assert!(err(&mut con, &["SORT", &src, "BY", &format!("{b}w_*")]).contains(by_err));
    assert!(err(&mut con, &["SORT", &src, "GET", "{*}x"]).contains(get_err));
    // Refused before the source is even looked up (as a syntax error).
    let _: () = q(&mut con, &["SET", "{zz}str", "x"]);
    assert!(err(&mut con, &["SORT", "{zz}str", "GET", "o_*"]).contains(get_err));
    // The source's own tag is fine.
    let got: Vec<String> = q(
        &mut con,
        &["SORT", &src, "BY", &format!("{a}w_*"), "GET", "#"],
    );
    assert_eq!(got, ["1", "2"]);
}
