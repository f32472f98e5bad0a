//! SORT and SORT_RO (Redis 7.0's `sort.c`): sorting a list, set or sorted
//! set numerically or lexicographically, by the element itself or by other
//! keys named through a `BY` pattern, projecting with `GET` patterns,
//! limiting, and storing the result as a list.
//!
//! # Shards
//!
//! Both commands are coordinated (`Exec::Coord`): the builder runs on the
//! connection's thread, where the number of shards is known, and finds
//! every argument error first, in Redis's order. BY/GET patterns name keys
//! that are not declared key arguments, so they are looked up on the source
//! key's shard only. As Redis Cluster does for hash slots, a pattern whose
//! keys may hash to another shard than the source key is refused when the
//! server has more than one shard, with Redis Cluster's error text; a
//! pattern with a `{tag}` ahead of its `*` hashes to the tag's slot, so
//! `SORT {u}list BY {u}w_* GET {u}o_*` works everywhere.
//!
//! Execution: one job on the source's shard does the sort (and the store
//! when the destination lives there too). A destination on another shard
//! gets a second job that writes the list; the transaction layer locks
//! the source and the destination between the two, so the pair is atomic
//! (pattern keys are read inside the first job, atomically on their
//! shard). A SORT on one shard is a single job and takes no lock.

use engine::{List, Shard, Value};
use resp::{Args, Reply};

use crate::coord::{outputs, Coordinator, JobOut, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, shard_of, CommandSpec, Exec};
use crate::util::{eq_ic, parse_i64};

const ACL_SORT: &[&str] = &["write", "set", "sortedset", "list", "slow", "dangerous"];
const ACL_SORT_RO: &[&str] = &["read", "set", "sortedset", "list", "slow", "dangerous"];

pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "sort",
        -2,
        WRITE | DENYOOM | MOVABLE_KEYS,
        keys(1, 1, 1),
        Exec::Coord(build_sort),
        ACL_SORT,
    )
    .with_getkeys(sort_getkeys),
    CommandSpec::new(
        "sort_ro",
        -2,
        READONLY | MOVABLE_KEYS,
        keys(1, 1, 1),
        Exec::Coord(build_sort_ro),
        ACL_SORT_RO,
    ),
];

const BY_DENIED: &str = "BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.";
const GET_DENIED: &str = "GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.";
const NOT_DOUBLE: &str = "One or more scores can't be converted into double";

/// Key positions of SORT (Redis's `sortGetKeys`): the source, and the
/// argument after the last `STORE`. Options are skipped as Redis skips
/// them, without checking they are well formed.
fn sort_getkeys(args: Args<'_>) -> Vec<usize> {
    let mut out = vec![1];
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        if eq_ic(a, "limit") {
            i += 2;
        } else if eq_ic(a, "get") || eq_ic(a, "by") {
            i += 1;
        } else if eq_ic(a, "store") && i + 1 < args.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    out.extend(store);
    out
}

/// A parsed SORT invocation.
#[derive(Clone, Debug, Default)]
struct Opts {
    desc: bool,
    alpha: bool,
    limit_start: i64,
    limit_count: i64,
    store: Option<Vec<u8>>,
    by: Option<Vec<u8>>,
    /// `BY` names a constant (no `*`): keep the native order.
    dontsort: bool,
    gets: Vec<Vec<u8>>,
}

/// The hash slot every key a pattern forms hashes to, as Redis's
/// `patternHashSlot`; `None` when they may hash anywhere.
fn pattern_slot(p: &[u8]) -> Option<u16> {
    let mut open: Option<usize> = None;
    let mut empty_tag = false;
    for (i, &c) in p.iter().enumerate() {
        match c {
            b'*' | b'?' | b'[' | b'\\' => return None,
            b'{' if open.is_none() && !empty_tag => open = Some(i),
            b'}' if open.is_some() => {
                let s = open.unwrap_or(0);
                if i == s + 1 {
                    // `{}`: the whole key is hashed.
                    open = None;
                    empty_tag = true;
                } else {
                    return Some(ds::crc16::crc16(&p[s + 1..i]) & 0x3FFF);
                }
            }
            _ => {}
        }
    }
    Some(ds::key_hash_slot(p))
}

/// Whether the keys `pattern` forms live on `src`'s shard.
fn same_shard(pattern: &[u8], src: &[u8], nshards: usize) -> bool {
    if nshards == 1 {
        return true;
    }
    pattern_slot(pattern)
        .is_some_and(|slot| slot as usize * nshards / 16384 == shard_of(src, nshards))
}

fn parse(args: Args<'_>, readonly: bool, nshards: usize) -> Result<Opts, CmdError> {
    let src = args.get(1);
    let mut o = Opts {
        limit_count: -1,
        ..Opts::default()
    };
    let mut j = 2;
    while j < args.len() {
        let a = args.get(j);
        let left = args.len() - j - 1;
        if eq_ic(a, "asc") {
            o.desc = false;
        } else if eq_ic(a, "desc") {
            o.desc = true;
        } else if eq_ic(a, "alpha") {
            o.alpha = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            o.limit_start = parse_i64(args.get(j + 1))?;
            o.limit_count = parse_i64(args.get(j + 2))?;
            j += 2;
        } else if !readonly && eq_ic(a, "store") && left >= 1 {
            o.store = Some(args.get(j + 1).to_vec());
            j += 1;
        } else if eq_ic(a, "by") && left >= 1 {
            let p = args.get(j + 1);
            o.by = Some(p.to_vec());
            if !p.contains(&b'*') {
                o.dontsort = true;
            } else {
                o.dontsort = false;
                if !same_shard(p, src, nshards) {
                    return Err(CmdError::err(BY_DENIED));
                }
            }
            j += 1;
        } else if eq_ic(a, "get") && left >= 1 {
            let p = args.get(j + 1);
            if p != b"#" && !same_shard(p, src, nshards) {
                return Err(CmdError::err(GET_DENIED));
            }
            o.gets.push(p.to_vec());
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// Redis's `lookupKeyByPattern`: `#` is the element itself; otherwise the
/// first `*` is replaced by the element and the key read as a string, or
/// with `->field` after the `*` as a hash field.
fn lookup_by_pattern(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    pat: &[u8],
    subst: &[u8],
) -> Option<Vec<u8>> {
    if pat == b"#" {
        return Some(subst.to_vec());
    }
    let star = pat.iter().position(|&c| c == b'*')?;
    let field = pat[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|i| star + 1 + i)
        .filter(|&f| f + 2 < pat.len());
    let key_end = field.unwrap_or(pat.len());
    let mut key = Vec::with_capacity(key_end + subst.len());
    key.extend_from_slice(&pat[..star]);
    key.extend_from_slice(subst);
    key.extend_from_slice(&pat[star + 1..key_end]);
    let e = shard.lookup_read(db, &key, touch)?;
    match (field, &e.value) {
        (None, Value::Str(s)) => Some(s.as_bytes().into_owned()),
        (Some(f), Value::Hash(h)) => h.get(&pat[f + 2..]).map(|v| v.to_vec()),
        _ => None,
    }
}

/// C's `strtod` over the whole argument as SORT uses it: leading white
/// space allowed, nothing after the number (a NUL ends the string), no
/// NaN, no overflow or underflow (`ERANGE`). `None` is an error.
fn sort_score(b: &[u8]) -> Option<f64> {
    let b = match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    };
    if b.is_empty() {
        // No conversion, and the end pointer is at the terminator.
        return Some(0.0);
    }
    let t = b.trim_ascii_start();
    let (neg, body) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = body.to_ascii_lowercase();
    let v = if lower == b"inf" || lower == b"infinity" {
        f64::INFINITY
    } else if lower.starts_with(b"nan") {
        return None;
    } else if lower.starts_with(b"0x") {
        parse_hex(&lower[2..])?
    } else {
        let s = std::str::from_utf8(body).ok()?;
        if !s
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
            || !s
                .bytes()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == b'.')
        {
            return None;
        }
        let v = s.parse::<f64>().ok()?;
        let mantissa = s.split(['e', 'E']).next().unwrap_or("");
        let nonzero = mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c));
        if v.is_infinite() || (nonzero && (v == 0.0 || v.is_subnormal())) {
            return None;
        }
        v
    };
    Some(if neg { -v } else { v })
}

/// The digits of a hexadecimal float after `0x` (`1f`, `1.8`, `1p4`).
fn parse_hex(s: &[u8]) -> Option<f64> {
    let (mant, exp) = match s.iter().position(|&c| c == b'p') {
        Some(p) => (&s[..p], Some(&s[p + 1..])),
        None => (s, None),
    };
    let mut v = 0f64;
    let mut scale = 0i32;
    let mut seen_dot = false;
    let mut digits = 0;
    for &c in mant {
        if c == b'.' && !seen_dot {
            seen_dot = true;
            continue;
        }
        let d = (c as char).to_digit(16)?;
        v = v * 16.0 + f64::from(d);
        digits += 1;
        if seen_dot {
            scale -= 4;
        }
    }
    if digits == 0 {
        return None;
    }
    if let Some(e) = exp {
        let e: i32 = std::str::from_utf8(e).ok()?.parse().ok()?;
        scale = scale.saturating_add(e);
    }
    let v = v * 2f64.powi(scale);
    (v.is_finite() && !(v == 0.0 && mant.iter().any(|c| c.is_ascii_hexdigit() && *c != b'0')))
        .then_some(v)
}

/// The sort's output: one item per element (or per GET per element);
/// `None` is a GET that found nothing.
type Items = Vec<Option<Vec<u8>>>;

/// Sorts `src` on `shard`: Redis's `sortCommandGeneric` after parsing.
fn sort_on(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    src: &[u8],
    opts: &Opts,
) -> Result<Items, CmdError> {
    let mut o = opts.clone();
    #[derive(PartialEq)]
    enum Kind {
        List,
        Set,
        ZSet,
    }
    let (kind, len) = match shard.lookup_read(db, src, touch) {
        None => (Kind::List, 0),
        Some(e) => match &mut e.value {
            Value::List(l) => (Kind::List, l.len()),
            Value::Set(s) => (Kind::Set, s.len()),
            Value::ZSet(z) => {
                // Redis 7.0 converts a sorted set it sorts to skiplist, for
                // good (`zsetConvert` in `sortCommandGeneric`); OBJECT
                // ENCODING shows it. Not a change of the value: no signal.
                z.to_skiplist();
                (Kind::ZSet, z.len())
            }
            _ => return Err(CmdError::WrongType),
        },
    };
    // A set has no order of its own: sorting it for STORE keeps replicas
    // and the stored list deterministic.
    if o.dontsort && kind == Kind::Set && o.store.is_some() {
        o.dontsort = false;
        o.alpha = true;
        o.by = None;
    }
    let vlen = len as i64;
    let mut start = o.limit_start.clamp(0, vlen);
    let count = o.limit_count.clamp(-1, vlen);
    let mut end = if count < 0 {
        vlen - 1
    } else {
        start + count - 1
    };
    if start >= vlen {
        start = vlen - 1;
        end = vlen - 2;
    }
    if end >= vlen {
        end = vlen - 1;
    }
    // Load the elements; lists and sorted sets in native order load only
    // the requested range.
    let mut elems: Vec<Vec<u8>> = Vec::new();
    if len > 0 {
        // INVARIANT: looked up just above, nothing removed it since.
        let e = shard.lookup_read(db, src, false).expect("sort source");
        let ranged = o.dontsort && kind != Kind::Set;
        let take = if ranged {
            (end - start + 1).max(0) as usize
        } else {
            len
        };
        let s = start as usize;
        match &e.value {
            Value::List(l) if ranged && take > 0 => {
                if o.desc {
                    l.iter_rev_from(len - 1 - s).copy_into(take, &mut elems);
                } else {
                    l.iter_from(s).copy_into(take, &mut elems);
                }
            }
            Value::ZSet(z) if ranged && take > 0 => {
                let from = if o.desc { len - 1 - s } else { s };
                elems.extend(
                    z.iter_from(from, o.desc)
                        .take(take)
                        .map(|(m, _)| m.to_vec()),
                );
            }
            _ if ranged => {}
            Value::List(l) => l.iter().copy_into(len, &mut elems),
            Value::ZSet(z) => elems.extend(z.iter().map(|(m, _)| m.to_vec())),
            Value::Set(st) => elems.extend(
                st.iter()
                    .map(|m| engine::types::set::with_bytes(m, <[u8]>::to_vec)),
            ),
            _ => return Err(CmdError::WrongType),
        }
        if ranged {
            end -= start;
            start = 0;
        }
    }
    if !o.dontsort {
        let mut conv_error = false;
        // Per element: its numeric score or, for ALPHA BY, the value.
        let mut keyed: Vec<(Vec<u8>, f64, Option<Vec<u8>>)> = Vec::with_capacity(elems.len());
        for el in elems.drain(..) {
            let byval = match &o.by {
                Some(p) => lookup_by_pattern(shard, db, touch, p, &el),
                None => None,
            };
            let (mut score, mut cmp) = (0.0, None);
            if o.alpha {
                cmp = byval;
            } else {
                let v = if o.by.is_some() {
                    byval.as_deref()
                } else {
                    Some(el.as_slice())
                };
                if let Some(v) = v {
                    match sort_score(v) {
                        Some(s) => score = s,
                        None => conv_error = true,
                    }
                }
            }
            keyed.push((el, score, cmp));
        }
        let by = o.by.is_some();
        keyed.sort_by(|a, b| {
            let c = if !o.alpha {
                a.1.partial_cmp(&b.1)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then_with(|| a.0.cmp(&b.0))
            } else if by {
                // A missing BY key sorts first.
                a.2.cmp(&b.2)
            } else {
                a.0.cmp(&b.0)
            };
            if o.desc {
                c.reverse()
            } else {
                c
            }
        });
        if conv_error {
            return Err(CmdError::err(NOT_DOUBLE));
        }
        elems = keyed.into_iter().map(|(e, _, _)| e).collect();
    }
    let mut items = Vec::new();
    if end >= start {
        for el in &elems[start as usize..=end as usize] {
            if o.gets.is_empty() {
                items.push(Some(el.clone()));
            }
            for p in &o.gets {
                items.push(lookup_by_pattern(shard, db, touch, p, el));
            }
        }
    }
    Ok(items)
}

/// Writes `items` to `dst` as a list (a missing GET stores an empty
/// string); no items deletes `dst`. Returns the stored length.
fn store_on(shard: &mut Shard, db: usize, dst: &[u8], items: Items) -> i64 {
    let n = items.len() as i64;
    if items.is_empty() {
        shard.remove(db, dst);
        return 0;
    }
    let mut l = List::new(&shard.enc);
    for it in &items {
        l.push_back(it.as_deref().unwrap_or(b""));
    }
    shard.store(db, dst, Value::List(l), 0);
    n
}

fn reply_items(out: &mut Reply, items: &Items) {
    out.array(items.len());
    for it in items {
        match it {
            Some(b) => out.bulk(b),
            None => out.null(),
        }
    }
}

/// What the job on the source's shard sends back.
enum Done {
    Items(Items),
    Stored(i64),
}

fn build_sort(ctx: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    build(ctx, args, false)
}

fn build_sort_ro(ctx: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    build(ctx, args, true)
}

fn build(
    ctx: &mut ConnCtx<'_>,
    args: Args<'_>,
    readonly: bool,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let n = ctx.nshards();
    let opts = parse(args, readonly, n)?;
    let src = args.get(1).to_vec();
    let db = ctx.client.db;
    let touch = !ctx.client.no_touch;
    let src_shard = shard_of(&src, n);
    let dst_shard = opts.store.as_deref().map(|d| shard_of(d, n));
    let mut plan = Plan::default();
    if dst_shard.is_none_or(|d| d == src_shard) {
        plan.run(src_shard, move |env| -> Result<Done, CmdError> {
            let items = sort_on(env.shard, db, touch, &src, &opts)?;
            Ok(match &opts.store {
                Some(dst) => Done::Stored(store_on(env.shard, db, dst, items)),
                None => Done::Items(items),
            })
        });
        return Ok(OneStep::boxed(
            plan,
            |res: Vec<Result<Done, CmdError>>, out: &mut Reply, _: &mut ClientState| {
                for r in res {
                    match r? {
                        Done::Items(items) => reply_items(out, &items),
                        Done::Stored(n) => out.int(n),
                    }
                }
                Ok(())
            },
        ));
    }
    let dst = dst_shard.zip(opts.store.clone());
    plan.run(src_shard, move |env| {
        sort_on(env.shard, db, touch, &src, &opts)
    });
    Ok(Box::new(StoreElsewhere {
        first: Some(plan),
        dst,
        db,
        stored: None,
    }))
}

/// SORT ... STORE into another shard: sort on the source's shard, then
/// write the list on the destination's.
struct StoreElsewhere {
    first: Option<Plan>,
    dst: Option<(usize, Vec<u8>)>,
    db: usize,
    stored: Option<i64>,
}

impl Coordinator for StoreElsewhere {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if let Some(p) = self.first.take() {
            *plan = p;
            return Ok(());
        }
        if let Some(n) = self.stored {
            out.int(n);
            return Ok(());
        }
        let Some(res) = outputs::<Result<Items, CmdError>>(results).pop() else {
            return Ok(());
        };
        let items = res?;
        self.stored = Some(items.len() as i64);
        // INVARIANT: built with a destination.
        let (s, dst) = self.dst.take().expect("sort destination");
        let db = self.db;
        plan.run(s, move |env| {
            store_on(env.shard, db, &dst, items);
        });
        plan.last = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    #[test]
    fn scores_follow_strtod() {
        assert_eq!(sort_score(b""), Some(0.0));
        assert_eq!(sort_score(b" 1"), Some(1.0));
        assert_eq!(sort_score(b"0x10"), Some(16.0));
        assert_eq!(sort_score(b"-2.5e1"), Some(-25.0));
        assert_eq!(sort_score(b"inf"), Some(f64::INFINITY));
        assert_eq!(sort_score(b"1\0x"), Some(1.0));
        for bad in [
            &b"1 "[..],
            b"nan",
            b"abc",
            b"-",
            b" ",
            b"1e400",
            b"1e-310",
            b"1e",
        ] {
            assert_eq!(sort_score(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn pattern_slots() {
        assert_eq!(pattern_slot(b"w_*"), None);
        assert_eq!(pattern_slot(b"{u}w_*"), Some(ds::key_hash_slot(b"u")));
        assert_eq!(pattern_slot(b"{u*}w"), None);
        assert_eq!(pattern_slot(b"{}x_*"), None);
        assert_eq!(pattern_slot(b"abc"), Some(ds::key_hash_slot(b"abc")));
    }

    #[test]
    fn getkeys_like_redis() {
        let a = resp::OwnedArgs::from_slices(&[
            &b"sort"[..],
            b"a",
            b"store",
            b"b",
            b"store",
            b"c",
            b"limit",
            b"store",
            b"x",
        ]);
        assert_eq!(sort_getkeys(a.args()), vec![1, 5]);
    }

    #[test]
    fn sorts_and_stores_across_shards() {
        let mut t = TestServer::new(3);
        t.run(&["RPUSH", "{a}l", "3", "1", "2"]);
        assert_eq!(
            t.run(&["SORT", "{a}l"]),
            "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
        );
        assert_ne!(shard_of(b"{a}l", 3), shard_of(b"{c}d", 3));
        assert_eq!(t.run(&["SORT", "{a}l", "DESC", "STORE", "{c}d"]), ":3\r\n");
        assert_eq!(
            t.run(&["LRANGE", "{c}d", "0", "-1"]),
            "*3\r\n$1\r\n3\r\n$1\r\n2\r\n$1\r\n1\r\n"
        );
        assert_eq!(t.run(&["SORT", "{a}nope", "STORE", "{c}d"]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "{c}d"]), ":0\r\n");
        assert!(t
            .run(&["SORT", "{a}l", "BY", "w_*"])
            .starts_with("-ERR BY option"));
        t.run(&["SET", "{a}w_1", "9"]);
        assert_eq!(
            t.run(&["SORT", "{a}l", "BY", "{a}w_*", "LIMIT", "0", "1"]),
            "*1\r\n$1\r\n2\r\n"
        );
    }
}
