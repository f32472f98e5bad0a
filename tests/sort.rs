//! SORT / SORT_RO through the real binary with several shards (each layout
//! of [`common::LAYOUTS`]: 2 and 16 shards, consolidated and not): STORE into
//! another shard, BY/GET patterns inside the source's hash tag (sorted on
//! one shard), and patterns whose keys live on other shards (sorted across
//! shards, atomically).

mod common;

use commands::table::shard_of;
use common::Layout;

/// A hash tag `{name}` whose keys live on shard `shard % shards` (so with
/// 2 shards, "shard 2" is shard 0 again).
fn tag_on(shards: usize, shard: usize) -> String {
    (0..10_000)
        .map(|n| format!("{{t{n}}}"))
        .find(|t| shard_of(t.as_bytes(), shards) == shard % shards)
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

fn store_into_another_shard(layout: Layout) {
    let shards = layout.shards;
    let s = layout.tessera(&[]);
    let mut con = s.conn();
    let (a, b) = (tag_on(shards, 0), tag_on(shards, shards - 1));
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

fn patterns_in_the_source_tag_work(layout: Layout) {
    let shards = layout.shards;
    let s = layout.tessera(&[]);
    let mut con = s.conn();
    for shard in 0..shards {
        let t = tag_on(shards, shard);
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

/// Elements `e0`, `e1`, ...: at least `n`, and as many more as it takes
/// for the keys `{prefix}{e}` of every prefix to cover every shard.
fn spread(shards: usize, prefixes: &[&str], n: usize) -> Vec<String> {
    let covered = |els: &[String]| {
        prefixes.iter().all(|p| {
            let on: std::collections::HashSet<usize> = els
                .iter()
                .map(|e| shard_of(format!("{p}{e}").as_bytes(), shards))
                .collect();
            on.len() == shards
        })
    };
    let mut els: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
    while !covered(&els) {
        els.push(format!("e{}", els.len()));
        assert!(els.len() < 100, "no {n}+ elements cover {shards} shards");
    }
    els
}

fn patterns_across_shards(layout: Layout) {
    let shards = layout.shards;
    let s = layout.tessera(&[]);
    let mut con = s.conn();
    let src = format!("{}l", tag_on(shards, 0));
    let els = spread(shards, &["w_", "o_"], 9);
    assert!((0..shards).all(|sh| els
        .iter()
        .any(|e| shard_of(format!("o_{e}").as_bytes(), shards) == sh)));
    // Weights descending with the element's index, objects and hashes for
    // every element but the last two.
    let n = els.len();
    let mut rpush = vec!["RPUSH", &src];
    rpush.extend(els.iter().map(String::as_str));
    let _: i64 = q(&mut con, &rpush);
    for (i, e) in els.iter().enumerate() {
        let _: () = q(
            &mut con,
            &["SET", &format!("w_{e}"), &(100 - i).to_string()],
        );
        if i < n - 2 {
            let _: () = q(&mut con, &["SET", &format!("o_{e}"), &format!("obj{i}")]);
            let _: i64 = q(
                &mut con,
                &[
                    "HSET",
                    &format!("h_{e}"),
                    "f",
                    &format!("{}", (b'a' + i as u8) as char),
                ],
            );
        }
    }
    let rev: Vec<String> = els.iter().rev().cloned().collect();
    let got: Vec<String> = q(&mut con, &["SORT", &src, "BY", "w_*"]);
    assert_eq!(got, rev);
    let got: Vec<String> = q(&mut con, &["SORT_RO", &src, "BY", "w_*", "DESC"]);
    assert_eq!(got, els);
    // GET #, GET strings and hash fields; missing keys are nulls.
    let got: Vec<Option<String>> = q(
        &mut con,
        &[
            "SORT", &src, "BY", "w_*", "LIMIT", "1", "3", "GET", "#", "GET", "o_*", "GET", "h_*->f",
        ],
    );
    let e = |i: usize| Some(els[i].clone());
    assert_eq!(
        got,
        [
            e(n - 2),
            None,
            None,
            e(n - 3),
            Some(format!("obj{}", n - 3)),
            Some(((b'a' + (n - 3) as u8) as char).to_string()),
            e(n - 4),
            Some(format!("obj{}", n - 4)),
            Some(((b'a' + (n - 4) as u8) as char).to_string()),
        ]
    );
    // BY a hash field, ALPHA; a missing BY value sorts first.
    let got: Vec<String> = q(
        &mut con,
        &[
            "SORT", &src, "BY", "h_*->f", "ALPHA", "DESC", "LIMIT", "0", "2",
        ],
    );
    assert_eq!(got, [els[n - 3].clone(), els[n - 4].clone()]);
    // ALPHA on the element, GET only.
    let got: Vec<Option<String>> = q(&mut con, &["SORT", &src, "ALPHA", "GET", "o_*"]);
    let mut sorted = els.clone();
    sorted.sort();
    let want: Vec<Option<String>> = sorted
        .iter()
        .map(|x| {
            let i = els.iter().position(|y| y == x).unwrap();
            (i < n - 2).then(|| format!("obj{i}"))
        })
        .collect();
    assert_eq!(got, want);
    // Wrong types behind the patterns read as missing: every BY score 0,
    // ties broken by the element; a GET of a hash as a string is null.
    let got: Vec<Option<String>> = q(&mut con, &["SORT", &src, "BY", "h_*", "GET", "h_*"]);
    assert_eq!(got, vec![None; n]);
    let got: Vec<String> = q(&mut con, &["SORT", &src, "BY", "o_*->f", "LIMIT", "0", "2"]);
    assert_eq!(got, [sorted[0].clone(), sorted[1].clone()]);
    // Another shard's tag, a `*` inside the tag.
    let b = tag_on(shards, 1);
    let _: () = q(&mut con, &["SET", &format!("{b}w_{}", els[0]), "-1"]);
    let got: Vec<String> = q(
        &mut con,
        &["SORT", &src, "BY", &format!("{b}w_*"), "LIMIT", "0", "1"],
    );
    assert_eq!(got, [els[0].clone()]);
    let got: Vec<Option<String>> = q(
        &mut con,
        &["SORT", &src, "ALPHA", "GET", "{*}x", "LIMIT", "0", "1"],
    );
    assert_eq!(got, [None]);
    // A BY value that is no number: the error, nothing stored.
    let dst = format!("{}dst", tag_on(shards, 2));
    let _: () = q(&mut con, &["SET", &dst, "keep"]);
    let _: () = q(&mut con, &["SET", &format!("w_{}", els[3]), "nan"]);
    assert!(err(&mut con, &["SORT", &src, "BY", "w_*", "STORE", &dst])
        .contains("One or more scores can't be converted into double"));
    let v: String = q(&mut con, &["GET", &dst]);
    assert_eq!(v, "keep");
    let _: () = q(&mut con, &["SET", &format!("w_{}", els[3]), "97"]);
    // STORE into a third shard; missing GETs stored as "".
    let n_st: i64 = q(
        &mut con,
        &[
            "SORT", &src, "BY", "w_*", "LIMIT", "0", "3", "GET", "o_*", "STORE", &dst,
        ],
    );
    assert_eq!(n_st, 3);
    let got: Vec<String> = q(&mut con, &["LRANGE", &dst, "0", "-1"]);
    assert_eq!(got, ["", "", format!("obj{}", n - 3).as_str()]);
    // STORE into a key the patterns read, on another shard.
    let w0 = format!("w_{}", els[0]);
    let _: i64 = q(
        &mut con,
        &["SORT", &src, "BY", "w_*", "GET", "w_*", "STORE", &w0],
    );
    let got: Vec<String> = q(&mut con, &["LRANGE", &w0, "0", "-1"]);
    let want: Vec<String> = (0..n).rev().map(|i| (100 - i).to_string()).collect();
    assert_eq!(got, want);
    // An empty result deletes the destination.
    let _: i64 = q(
        &mut con,
        &[
            "SORT",
            &format!("{}none", tag_on(shards, 1)),
            "BY",
            "w_*",
            "STORE",
            &dst,
        ],
    );
    let ex: i64 = q(&mut con, &["EXISTS", &dst]);
    assert_eq!(ex, 0);
    // The source's type is checked first.
    let _: () = q(&mut con, &["SET", "str", "x"]);
    assert!(err(&mut con, &["SORT", "str", "BY", "w_*", "GET", "o_*"]).contains("WRONGTYPE"));
    // Inside MULTI, next to other commands.
    let _: () = q(&mut con, &["MULTI"]);
    let _: String = q(&mut con, &["SET", &format!("w_{}", els[1]), "-5"]);
    let _: String = q(
        &mut con,
        &["SORT", &src, "BY", "w_*", "LIMIT", "0", "1", "GET", "o_*"],
    );
    let r: (String, Vec<String>) = q(&mut con, &["EXEC"]);
    assert_eq!(r, ("OK".into(), vec!["obj1".into()]));
}

fn cross_shard_sort_sees_a_multi_shard_mset_whole(layout: Layout) {
    let shards = layout.shards;
    let s = layout.tessera(&[]);
    let els = spread(shards, &["w_", "o_"], 12);
    let src = format!("{}l", tag_on(shards, 0));
    let mut con = s.conn();
    let mut rpush = vec!["RPUSH", &src];
    rpush.extend(els.iter().map(String::as_str));
    let _: i64 = q(&mut con, &rpush);
    // Round r: w_e = ±index (the order flips with the round's parity) and
    // o_e = r, all in one MSET spanning every shard.
    let mset = |r: usize| -> Vec<String> {
        let mut a = vec!["MSET".to_string()];
        for (i, e) in els.iter().enumerate() {
            let w = if r.is_multiple_of(2) {
                i as i64
            } else {
                -(i as i64)
            };
            a.extend([
                format!("w_{e}"),
                w.to_string(),
                format!("o_{e}"),
                r.to_string(),
            ]);
        }
        a
    };
    let args = mset(0);
    let _: () = q(
        &mut con,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    const ROUNDS: usize = 300;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut con = s.conn();
            for r in 1..=ROUNDS {
                let args = mset(r);
                let _: () = q(
                    &mut con,
                    &args.iter().map(String::as_str).collect::<Vec<_>>(),
                );
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut con = s.conn();
        let mut seen = std::collections::BTreeSet::new();
        loop {
            let last = done.load(std::sync::atomic::Ordering::SeqCst);
            let got: Vec<String> = q(
                &mut con,
                &["SORT", &src, "BY", "w_*", "GET", "o_*", "GET", "#"],
            );
            let round: usize = got[0].parse().unwrap();
            let order: Vec<&String> = got.iter().skip(1).step_by(2).collect();
            let mut want: Vec<&String> = els.iter().collect();
            if !round.is_multiple_of(2) {
                want.reverse();
            }
            for pair in got.chunks(2) {
                assert_eq!(pair[0], got[0], "one round of o_*: {got:?}");
            }
            assert_eq!(order, want, "the weights of round {round}");
            seen.insert(round);
            if last {
                break;
            }
        }
        assert!(seen.contains(&ROUNDS));
    });
}

per_layout!(
    store_into_another_shard,
    patterns_in_the_source_tag_work,
    patterns_across_shards,
    cross_shard_sort_sees_a_multi_shard_mset_whole,
);
