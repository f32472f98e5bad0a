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
//! that are not declared key arguments, so where they live decides how the
//! sort runs:
//!
//! * **One shard** (one shard in all, patterns that form no key — `#`, a
//!   BY without `*` — or patterns whose `{tag}` hashes to the source's
//!   shard): one job on the source's shard sorts, looking pattern keys up
//!   there, and stores when the destination lives there too. A destination
//!   on another shard gets a second job that writes the list; the
//!   transaction layer locks the source and the destination between the
//!   two. A SORT on one shard is a single job and takes no lock.
//! * **Across shards** (a pattern key may hash anywhere): the keys are
//!   only known once the source is read, so the command locks the whole
//!   keyspace for reading (a whole-shard Read lock on every shard, as KEYS
//!   does) and its destination for writing ([`sort_locks`]), then runs as
//!   [`CrossShard`]: read the source's elements on its shard; read the
//!   substituted BY and GET keys, one job per shard; sort, limit and
//!   project on the connection's thread with the same code as the
//!   one-shard path; store on the destination's shard. Atomic and isolated
//!   like every multi-shard command: a concurrent MSET of the weights is
//!   seen whole or not at all.

use std::collections::HashMap;

use engine::lazyfree::Del;
use engine::{List, Shard, Value, ValueRef};
use resp::{Args, OwnedArgs, Reply};

use crate::coord::{outputs, Coordinator, JobOut, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::table::{flags::*, keys, shard_of, CommandSpec, Exec};
use crate::tx::{LockSet, Mode};
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
    .with_getkeys(sort_getkeys)
    .with_locks(sort_locks),
    CommandSpec::new(
        "sort_ro",
        -2,
        READONLY | MOVABLE_KEYS,
        keys(1, 1, 1),
        Exec::Coord(build_sort_ro),
        ACL_SORT_RO,
    )
    .with_locks(sort_ro_locks),
];

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
    /// Some `BY` named a constant (no `*`): keep the native order.
    dontsort: bool,
    gets: Vec<Vec<u8>>,
    /// Called from a script: an unsorted set is sorted as for STORE.
    script: bool,
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

/// Whether a key some BY or GET pattern forms may live on another shard
/// than `src`: the sort then runs across shards. Patterns without `*` form
/// no key (`#`, a constant BY, which means no sort, or a constant GET,
/// which reads nothing).
fn crosses(o: &Opts, src: &[u8], nshards: usize) -> bool {
    let by = o.by.as_deref().filter(|_| !o.dontsort);
    nshards > 1
        && by
            .into_iter()
            .chain(o.gets.iter().map(Vec::as_slice))
            .any(|p| p.contains(&b'*') && !same_shard(p, src, nshards))
}

/// The locks of a SORT across shards (see the module docs): a whole-shard
/// Read lock on every shard and a Write lock on the destination. `None`
/// (dispatch's default) for a sort on one shard, or arguments the builder
/// will refuse.
fn locks(args: Args<'_>, readonly: bool, db: usize, nshards: usize) -> Option<LockSet> {
    let o = parse(args, readonly, true).ok()?;
    if !crosses(&o, args.get(1), nshards) {
        return None;
    }
    let mut set = LockSet::default();
    set.whole(nshards, Mode::Read);
    if let Some(dst) = &o.store {
        set.key(nshards, db, dst, Mode::Write);
    }
    Some(set)
}

fn sort_locks(
    args: Args<'_>,
    db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<LockSet> {
    locks(args, false, db, nshards)
}

fn sort_ro_locks(
    args: Args<'_>,
    db: usize,
    nshards: usize,
    _: &crate::ServerShared,
) -> Option<LockSet> {
    locks(args, true, db, nshards)
}

/// SORT's options, in Redis's order of errors. `reads_every_key`: whether
/// the user may read any key (see `acl::check::reads_every_key`); without
/// it a BY pattern with `*` or a GET is refused where it is met, as Redis.
fn parse(args: Args<'_>, readonly: bool, reads_every_key: bool) -> Result<Opts, CmdError> {
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
            // As Redis: once a BY without `*` is seen the sort stays off,
            // whatever BY comes later (`BY nosort BY w_*` keeps the order).
            if !p.contains(&b'*') {
                o.dontsort = true;
            } else if !reads_every_key {
                return Err(CmdError::err(
                    "BY option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            j += 1;
        } else if eq_ic(a, "get") && left >= 1 {
            if !reads_every_key {
                return Err(CmdError::err(
                    "GET option of SORT denied due to insufficient ACL permissions.",
                ));
            }
            o.gets.push(args.get(j + 1).to_vec());
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// A key a pattern forms, and the hash field named after `->`.
type PatKey = (Vec<u8>, Option<Vec<u8>>);

/// What a pattern names for one element (Redis's `lookupKeyByPattern`
/// before its lookup).
enum PatRef {
    /// `#`: the element itself.
    Elem,
    /// No `*`: nothing (a fixed key is never read).
    Nothing,
    /// The first `*` replaced by the element; with `->field` after the
    /// `*`, a field of the hash at that key.
    Key(PatKey),
}

fn pattern_ref(pat: &[u8], subst: &[u8]) -> PatRef {
    if pat == b"#" {
        return PatRef::Elem;
    }
    let Some(star) = pat.iter().position(|&c| c == b'*') else {
        return PatRef::Nothing;
    };
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
    PatRef::Key((key, field.map(|f| pat[f + 2..].to_vec())))
}

/// The value behind a pattern key: a string, or the field of a hash; any
/// other type (or a string where a field is asked, or a hash where none
/// is) reads as missing, as in Redis.
fn read_pattern_key(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    key: &[u8],
    field: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let e = shard.lookup_read(db, key, touch)?;
    match (field, e.value()) {
        (None, ValueRef::Str(s)) => Some(s.as_bytes().into_owned()),
        (Some(f), ValueRef::Hash(h)) => h.get(f).map(|v| v.to_vec()),
        _ => None,
    }
}

/// Redis's `lookupKeyByPattern` on the shard holding the keys.
fn lookup_by_pattern(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    pat: &[u8],
    subst: &[u8],
) -> Option<Vec<u8>> {
    match pattern_ref(pat, subst) {
        PatRef::Elem => Some(subst.to_vec()),
        PatRef::Nothing => None,
        PatRef::Key((key, field)) => read_pattern_key(shard, db, touch, &key, field.as_deref()),
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

/// The source's elements as loaded for sorting, with the options as
/// they apply to this source and the range of the (sorted) elements the
/// command returns.
struct Loaded {
    o: Opts,
    elems: Vec<Vec<u8>>,
    start: i64,
    end: i64,
}

impl Loaded {
    /// The elements the command returns, once sorted.
    fn range(&self) -> &[Vec<u8>] {
        if self.end >= self.start {
            &self.elems[self.start as usize..=self.end as usize]
        } else {
            &[]
        }
    }
}

/// Reads `src` on `shard` for sorting: Redis's `sortCommandGeneric` after
/// parsing, up to the sort.
fn load(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    src: &[u8],
    opts: &Opts,
) -> Result<Loaded, CmdError> {
    let mut o = opts.clone();
    #[derive(PartialEq)]
    enum Kind {
        List,
        Set,
        ZSet,
    }
    let (kind, len) = match shard.lookup_read(db, src, touch) {
        None => (Kind::List, 0),
        // A string answers WRONGTYPE without being touched (`value_mut`
        // would change how it is stored).
        Some(e) if matches!(e.value(), ValueRef::Str(_)) => return Err(CmdError::WrongType),
        Some(e) => match e.value_mut() {
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
    if o.dontsort && kind == Kind::Set && (o.store.is_some() || o.script) {
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
        // INVARIANT: looked up just above, nothing removed it since. (Not
        // a second lookup: Redis counts one keyspace hit for the source.)
        let e = shard.dbs[db].get(src).expect("sort source");
        let ranged = o.dontsort && kind != Kind::Set;
        let take = if ranged {
            (end - start + 1).max(0) as usize
        } else {
            len
        };
        let s = start as usize;
        match e.value() {
            ValueRef::List(l) if ranged && take > 0 => {
                if o.desc {
                    l.iter_rev_from(len - 1 - s).copy_into(take, &mut elems);
                } else {
                    l.iter_from(s).copy_into(take, &mut elems);
                }
            }
            ValueRef::ZSet(z) if ranged && take > 0 => {
                let from = if o.desc { len - 1 - s } else { s };
                elems.extend(
                    z.iter_from(from, o.desc)
                        .take(take)
                        .map(|(m, _)| m.to_vec()),
                );
            }
            _ if ranged => {}
            ValueRef::List(l) => l.iter().copy_into(len, &mut elems),
            ValueRef::ZSet(z) => elems.extend(z.iter().map(|(m, _)| m.to_vec())),
            ValueRef::Set(st) => elems.extend(
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
    Ok(Loaded {
        o,
        elems,
        start,
        end,
    })
}

/// Whether [`order`] reads the BY pattern (it reads it for every element).
fn sorts_by_pattern(o: &Opts) -> bool {
    !o.dontsort && o.by.is_some()
}

/// Sorts the loaded elements (unless BY names no key): `look(pattern,
/// element)` gives a pattern's value for an element, asked once per
/// element in order for the BY pattern.
fn order(
    l: &mut Loaded,
    mut look: impl FnMut(&[u8], &[u8]) -> Option<Vec<u8>>,
) -> Result<(), CmdError> {
    let Loaded { o, elems, .. } = l;
    if o.dontsort {
        return Ok(());
    }
    let mut conv_error = false;
    // Per element: its numeric score or, for ALPHA BY, the value.
    let mut keyed: Vec<(Vec<u8>, f64, Option<Vec<u8>>)> = Vec::with_capacity(elems.len());
    for el in elems.drain(..) {
        let byval = match &o.by {
            Some(p) => look(p, &el),
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
    // ALPHA compares with strcoll (C locale: bytes up to the first NUL)
    // unless the result is stored, then whole byte strings (Redis's
    // sortCompare). Ties keep their input order (a stable sort, as glibc's
    // qsort), in either direction.
    let alpha = |x: &[u8], y: &[u8]| {
        if o.store.is_some() {
            x.cmp(y)
        } else {
            let c = |s: &[u8]| s.iter().position(|&b| b == 0).unwrap_or(s.len());
            x[..c(x)].cmp(&y[..c(y)])
        }
    };
    keyed.sort_by(|a, b| {
        let c = if !o.alpha {
            a.1.partial_cmp(&b.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.0.cmp(&b.0))
        } else if by {
            // A missing BY key sorts first.
            match (&a.2, &b.2) {
                (Some(x), Some(y)) => alpha(x, y),
                (x, y) => x.is_some().cmp(&y.is_some()),
            }
        } else {
            alpha(&a.0, &b.0)
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
    *elems = keyed.into_iter().map(|(e, _, _)| e).collect();
    Ok(())
}

/// The command's output from the sorted elements: each returned element,
/// or each GET pattern's value for it (`look` as for [`order`]).
fn project(l: &Loaded, mut look: impl FnMut(&[u8], &[u8]) -> Option<Vec<u8>>) -> Items {
    let mut items = Vec::new();
    for el in l.range() {
        if l.o.gets.is_empty() {
            items.push(Some(el.clone()));
        }
        for p in &l.o.gets {
            items.push(look(p, el));
        }
    }
    items
}

/// Sorts `src` on `shard`, pattern keys read there too.
fn sort_on(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    src: &[u8],
    opts: &Opts,
) -> Result<Items, CmdError> {
    let mut l = load(shard, db, touch, src, opts)?;
    let mut look = |p: &[u8], el: &[u8]| lookup_by_pattern(shard, db, touch, p, el);
    order(&mut l, &mut look)?;
    Ok(project(&l, look))
}

/// What [`from_script`] returns.
pub(crate) type FromScript = Result<Result<(), Vec<Vec<u8>>>, CmdError>;

/// A script's SORT / SORT_RO call: which of the two it is, and whether
/// the script's user may read every key (Redis's scriptCall runs the call
/// as that user, so a BY pattern with `*` or a GET without that access is
/// refused as a client's is: see `acl::Caller::reads_every_key`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScriptCall {
    pub readonly: bool,
    pub reads_every_key: bool,
}

/// SORT / SORT_RO called by a script, on the shard (or the gathered
/// copies) it runs on: `Ok(Err(keys))` when pattern keys the script does
/// not hold (`held`) are needed, to gather before running it again (see
/// `script::wide`). As Redis, an unsorted set (BY a constant) comes
/// sorted lexicographically to a script.
pub(crate) fn from_script(
    shard: &mut Shard,
    db: usize,
    touch: bool,
    args: Args<'_>,
    call: ScriptCall,
    held: &dyn Fn(&[u8]) -> bool,
    out: &mut Reply,
) -> FromScript {
    let mut opts = parse(args, call.readonly, call.reads_every_key)?;
    opts.script = true;
    let src = args.get(1);
    let mut l = load(shard, db, touch, src, &opts)?;
    let mut missing = Vec::new();
    let by = l.o.by.clone().filter(|_| sorts_by_pattern(&l.o));
    for p in by.iter().chain(l.o.gets.iter()) {
        for el in &l.elems {
            if let PatRef::Key((key, _)) = pattern_ref(p, el) {
                if !held(&key) && !missing.contains(&key) {
                    missing.push(key);
                }
            }
        }
    }
    if !missing.is_empty() {
        return Ok(Err(missing));
    }
    let mut look = |p: &[u8], el: &[u8]| lookup_by_pattern(shard, db, touch, p, el);
    order(&mut l, &mut look)?;
    let items = project(&l, look);
    match &opts.store {
        Some(dst) => {
            let n = store_on(shard, db, dst, items, &args.to_owned());
            out.int(n);
        }
        None => reply_items(out, &items),
    }
    Ok(Ok(()))
}

/// The keys SORT / SORT_RO's BY and GET patterns name for the elements of
/// its source on `shard` (a script's call whose keys are on several
/// shards, run on copies of them and these: `script::run`). Its source's
/// lookup counts no keyspace hit or miss here (the copies' run counts).
pub(crate) fn pattern_keys(
    shard: &mut Shard,
    db: usize,
    args: Args<'_>,
    call: ScriptCall,
) -> Result<Vec<Vec<u8>>, CmdError> {
    let mut opts = parse(args, call.readonly, call.reads_every_key)?;
    opts.script = true;
    let counts = (shard.stats.keyspace_hits, shard.stats.keyspace_misses);
    let l = load(shard, db, false, args.get(1), &opts);
    (shard.stats.keyspace_hits, shard.stats.keyspace_misses) = counts;
    let l = l?;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let by = l.o.by.clone().filter(|_| sorts_by_pattern(&l.o));
    for p in by.iter().chain(l.o.gets.iter()) {
        for el in &l.elems {
            if let PatRef::Key((key, _)) = pattern_ref(p, el) {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
    }
    Ok(keys)
}

/// Writes `items` to `dst` as a list (a missing GET stores an empty
/// string; a `sortstore` event); no items deletes `dst` (`del` if it
/// existed). Returns the stored length. Runs on `dst`'s shard, which
/// emits the event and, when it changed `dst`, the command as received
/// (`sort`: Redis propagates SORT ... STORE verbatim when dirty).
fn store_on(shard: &mut Shard, db: usize, dst: &[u8], items: Items, sort: &OwnedArgs) -> i64 {
    let n = items.len() as i64;
    if items.is_empty() {
        if shard.delete(db, dst, Del::Server) {
            shard.notify(db, ds::events::GENERIC, "del", dst);
            shard.outbox.record_args(db, sort.args().iter());
        }
        return 0;
    }
    let mut l = List::new(&shard.enc);
    for it in &items {
        l.push_back(it.as_deref().unwrap_or(b""));
    }
    shard.store(db, dst, Value::List(l), 0);
    // Redis files it under the list class.
    shard.notify(db, ds::events::LIST, "sortstore", dst);
    shard.outbox.record_args(db, sort.args().iter());
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

/// Whether the client's user may read every key with this SORT (an
/// unrestricted user always may).
fn reads_every_key(ctx: &mut ConnCtx<'_>, args: Args<'_>, readonly: bool) -> bool {
    let server = ctx.server;
    if ctx
        .client
        .acl
        .user
        .as_ref()
        .is_some_and(|u| u.unrestricted())
    {
        return true;
    }
    let (user, rules) = ctx.client.acl.rules(&server.acl);
    if user.unrestricted() {
        return true;
    }
    let name = if readonly { "sort_ro" } else { "sort" };
    let Some(id) = crate::table::registry().lookup_full(name.as_bytes()) else {
        return true;
    };
    crate::acl::check::reads_every_key(&rules, id, args)
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
    let opts = parse(args, readonly, reads_every_key(ctx, args, readonly))?;
    let src = args.get(1).to_vec();
    let db = ctx.client.db;
    let touch = !ctx.client.no_touch;
    // What a store is propagated as (see `store_on`).
    let record = if opts.store.is_some() {
        args.to_owned()
    } else {
        OwnedArgs::default()
    };
    if crosses(&opts, &src, n) {
        return Ok(Box::new(CrossShard {
            stage: Stage::Start(src, opts),
            db,
            touch,
            nshards: n,
            read: HashMap::new(),
            stored: 0,
            record,
        }));
    }
    let src_shard = shard_of(&src, n);
    let dst_shard = opts.store.as_deref().map(|d| shard_of(d, n));
    let mut plan = Plan::default();
    if dst_shard.is_none_or(|d| d == src_shard) {
        plan.run(src_shard, move |env| -> Result<Done, CmdError> {
            let items = sort_on(env.shard, db, touch, &src, &opts)?;
            Ok(match &opts.store {
                Some(dst) => Done::Stored(store_on(env.shard, db, dst, items, &record)),
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
        record,
    }))
}

/// SORT ... STORE into another shard: sort on the source's shard, then
/// write the list on the destination's.
struct StoreElsewhere {
    first: Option<Plan>,
    dst: Option<(usize, Vec<u8>)>,
    db: usize,
    stored: Option<i64>,
    /// The command as received, its record.
    record: OwnedArgs,
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
        let record = std::mem::take(&mut self.record);
        plan.run(s, move |env| {
            store_on(env.shard, db, &dst, items, &record);
        });
        plan.last = true;
        Ok(())
    }
}

/// Where a [`CrossShard`] sort stands.
enum Stage {
    /// Nothing ran yet: the source key and the options.
    Start(Vec<u8>, Opts),
    /// The source's elements are being read.
    Loading,
    /// Pattern keys are being read for these elements.
    Reading(Loaded, Read),
    /// The result is being stored.
    Storing,
}

/// What a [`CrossShard`] sort has read of its pattern keys.
#[derive(Clone, Copy)]
enum Read {
    /// Nothing yet.
    Nothing,
    /// The BY keys of every element (and their GET keys when `gets`).
    By { gets: bool },
    /// The GET keys of the returned elements, once sorted.
    Gets,
}

/// Pattern keys to read, each with the number of times Redis looks it up
/// (every lookup counts a keyspace hit or miss and an access).
type Wanted = HashMap<PatKey, u32>;

/// SORT with BY/GET patterns whose keys may live on other shards, under a
/// whole-keyspace Read lock (see the module docs): read the source, read
/// the pattern keys one job per shard, sort and project here with the
/// one-shard path's code, store.
struct CrossShard {
    stage: Stage,
    db: usize,
    touch: bool,
    nshards: usize,
    /// The pattern keys read so far and their values.
    read: HashMap<PatKey, Option<Vec<u8>>>,
    /// The stored length, for the reply after the store.
    stored: i64,
    /// The command as received, its record.
    record: OwnedArgs,
}

impl CrossShard {
    /// A pattern's value for an element from the keys read.
    fn look(read: &HashMap<PatKey, Option<Vec<u8>>>, pat: &[u8], el: &[u8]) -> Option<Vec<u8>> {
        match pattern_ref(pat, el) {
            PatRef::Elem => Some(el.to_vec()),
            PatRef::Nothing => None,
            PatRef::Key(k) => {
                debug_assert!(read.contains_key(&k), "a pattern key not read");
                read.get(&k).cloned().flatten()
            }
        }
    }

    /// Adds the keys `pats` form for `elems`.
    fn want(pats: &[Vec<u8>], elems: &[Vec<u8>], out: &mut Wanted) {
        for el in elems {
            for p in pats {
                if let PatRef::Key(k) = pattern_ref(p, el) {
                    *out.entry(k).or_default() += 1;
                }
            }
        }
    }

    /// Reads `keys`, one job per shard.
    fn read_keys(&self, keys: Wanted, plan: &mut Plan) {
        let mut groups: Vec<(usize, Vec<(PatKey, u32)>)> = Vec::new();
        for k in keys {
            let s = shard_of(&k.0 .0, self.nshards);
            match groups.iter_mut().find(|(g, _)| *g == s) {
                Some((_, v)) => v.push(k),
                None => groups.push((s, vec![k])),
            }
        }
        groups.sort_by_key(|(s, _)| *s);
        let (db, touch) = (self.db, self.touch);
        for (s, keys) in groups {
            plan.run(s, move |env| {
                keys.into_iter()
                    .map(|((key, field), times)| {
                        let v = read_pattern_key(env.shard, db, touch, &key, field.as_deref());
                        for _ in 1..times {
                            read_pattern_key(env.shard, db, touch, &key, field.as_deref());
                        }
                        ((key, field), v)
                    })
                    .collect::<Vec<_>>()
            });
        }
    }

    /// Moves the sort on with what is read: reads what is missing (BY
    /// keys of every element, then GET keys of the returned ones; both at
    /// once when every element is returned), or sorts, projects and
    /// replies or stores.
    fn advance(
        &mut self,
        mut l: Loaded,
        done: Read,
        plan: &mut Plan,
        out: &mut Reply,
    ) -> Result<(), CmdError> {
        let store = l.o.store.is_some();
        let gets_read = match done {
            Read::Nothing => {
                if sorts_by_pattern(&l.o) {
                    let mut keys = Wanted::new();
                    let by: Vec<Vec<u8>> = l.o.by.iter().cloned().collect();
                    Self::want(&by, &l.elems, &mut keys);
                    // Every element returned: their GET keys too.
                    let gets = l.range().len() == l.elems.len();
                    if gets {
                        Self::want(&l.o.gets, &l.elems, &mut keys);
                    }
                    if !keys.is_empty() {
                        self.read_keys(keys, plan);
                        plan.last = !store && (gets || !l.o.gets.iter().any(|p| p.contains(&b'*')));
                        self.stage = Stage::Reading(l, Read::By { gets });
                        return Ok(());
                    }
                }
                let read = &self.read;
                order(&mut l, |p, el| Self::look(read, p, el))?;
                false
            }
            Read::By { gets } => {
                let read = &self.read;
                order(&mut l, |p, el| Self::look(read, p, el))?;
                gets
            }
            Read::Gets => true,
        };
        if !gets_read {
            let mut keys = Wanted::new();
            Self::want(&l.o.gets, l.range(), &mut keys);
            if !keys.is_empty() {
                self.read_keys(keys, plan);
                plan.last = !store;
                self.stage = Stage::Reading(l, Read::Gets);
                return Ok(());
            }
        }
        let read = &self.read;
        let items = project(&l, |p, el| Self::look(read, p, el));
        match l.o.store {
            Some(dst) => {
                self.stored = items.len() as i64;
                let db = self.db;
                let record = std::mem::take(&mut self.record);
                plan.run(shard_of(&dst, self.nshards), move |env| {
                    store_on(env.shard, db, &dst, items, &record);
                });
                plan.last = true;
                self.stage = Stage::Storing;
            }
            None => reply_items(out, &items),
        }
        Ok(())
    }
}

impl Coordinator for CrossShard {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        match std::mem::replace(&mut self.stage, Stage::Loading) {
            Stage::Start(src, opts) => {
                let (db, touch) = (self.db, self.touch);
                plan.run(shard_of(&src, self.nshards), move |env| {
                    load(env.shard, db, touch, &src, &opts)
                });
                Ok(())
            }
            Stage::Loading => {
                let Some(l) = outputs::<Result<Loaded, CmdError>>(results).pop() else {
                    return Ok(());
                };
                self.advance(l?, Read::Nothing, plan, out)
            }
            Stage::Reading(l, done) => {
                for got in outputs::<Vec<(PatKey, Option<Vec<u8>>)>>(results) {
                    self.read.extend(got);
                }
                self.advance(l, done, plan, out)
            }
            Stage::Storing => {
                out.int(self.stored);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;
    use std::collections::HashSet;

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
        t.run(&["SET", "{a}w_1", "9"]);
        assert_eq!(
            t.run(&["SORT", "{a}l", "BY", "{a}w_*", "LIMIT", "0", "1"]),
            "*1\r\n$1\r\n2\r\n"
        );
    }

    /// `keyspace_hits` and `keyspace_misses` of INFO stats.
    fn hits_misses(t: &mut TestServer) -> (u64, u64) {
        let info = t.run(&["INFO", "stats"]);
        let get = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in {info}"))
        };
        (get("keyspace_hits:"), get("keyspace_misses:"))
    }

    #[test]
    fn cross_shard_lookups_count_as_redis() {
        let mut t = TestServer::new(3);
        t.run(&["RPUSH", "l", "1", "2", "3"]);
        t.run(&[
            "MSET", "w_1", "30", "w_2", "10", "w_3", "20", "o_1", "one", "o_3", "three",
        ]);
        t.run(&["HSET", "h_2", "f", "hf"]);
        // Figures from redis-server 7.0: the source, each BY lookup, each
        // GET lookup of the returned elements, repeated keys included.
        t.run(&["CONFIG", "RESETSTAT"]);
        t.run(&[
            "SORT", "l", "BY", "w_*", "GET", "#", "GET", "o_*", "GET", "h_*->f", "LIMIT", "0", "2",
        ]);
        assert_eq!(hits_misses(&mut t), (6, 2));
        t.run(&["CONFIG", "RESETSTAT"]);
        t.run(&["SORT", "l", "BY", "w_*", "GET", "w_*", "GET", "w_*"]);
        assert_eq!(hits_misses(&mut t), (10, 0));
        // The same on one shard.
        t.run(&["RPUSH", "{a}l", "1", "2", "3"]);
        t.run(&["MSET", "{a}w_1", "30", "{a}w_2", "10", "{a}w_3", "20"]);
        t.run(&["CONFIG", "RESETSTAT"]);
        t.run(&[
            "SORT", "{a}l", "BY", "{a}w_*", "GET", "{a}w_*", "GET", "{a}o_*",
        ]);
        assert_eq!(hits_misses(&mut t), (7, 3));
    }

    #[test]
    fn patterns_across_shards() {
        let mut t = TestServer::new(3);
        let keys = ["w_1", "w_2", "w_3", "o_1", "o_2", "o_3", "h_1", "l", "d"];
        let shards: HashSet<usize> = keys.iter().map(|k| shard_of(k.as_bytes(), 3)).collect();
        assert!(shards.len() > 1, "the keys span shards");
        t.run(&["RPUSH", "l", "1", "2", "3"]);
        t.run(&["MSET", "w_1", "30", "w_2", "10", "w_3", "20"]);
        t.run(&["MSET", "o_1", "one", "o_3", "three"]);
        t.run(&["HSET", "h_2", "f", "hf"]);
        assert_eq!(
            t.run(&["SORT", "l", "BY", "w_*", "GET", "#", "GET", "o_*", "GET", "h_*->f"]),
            "*9\r\n$1\r\n2\r\n$-1\r\n$2\r\nhf\r\n$1\r\n3\r\n$5\r\nthree\r\n$-1\r\n\
             $1\r\n1\r\n$3\r\none\r\n$-1\r\n"
        );
        assert_eq!(
            t.run(&["SORT_RO", "l", "BY", "w_*", "DESC", "LIMIT", "1", "1", "GET", "o_*"]),
            "*1\r\n$5\r\nthree\r\n"
        );
        assert_eq!(
            t.run(&["SORT", "l", "BY", "w_*", "GET", "o_*", "STORE", "d"]),
            ":3\r\n"
        );
        assert_eq!(
            t.run(&["LRANGE", "d", "0", "-1"]),
            "*3\r\n$0\r\n\r\n$5\r\nthree\r\n$3\r\none\r\n"
        );
        // Inside MULTI (whole-keyspace locks there).
        t.run(&["MULTI"]);
        t.run(&["SORT", "l", "BY", "w_*", "GET", "o_*"]);
        assert_eq!(
            t.run(&["EXEC"]),
            "*1\r\n*3\r\n$-1\r\n$5\r\nthree\r\n$3\r\none\r\n"
        );
    }
}
