//! GEO commands (Redis 7.0's `geo.c`): GEOADD, GEODIST, GEOHASH, GEOPOS,
//! GEOSEARCH, GEOSEARCHSTORE, GEORADIUS, GEORADIUSBYMEMBER and the two
//! `_RO` forms. Request path.
//!
//! A geo set is a sorted set whose scores are 52-bit geohashes
//! (`ds::geohash` owns the arithmetic); nothing here is a new value type:
//!
//! * GEOADD turns each `longitude latitude member` into `score member` and
//!   runs ZADD with them, as Redis does (`replaceClientCommandVector`), so
//!   it has ZADD's replies, and it is propagated as that ZADD (the ZADD
//!   handler emits the arguments it ran with, [`as_zadd`]'s);
//! * a search visits the centre cell and its 8 neighbours at a step chosen
//!   from the radius, reading each cell's score range from the set, and
//!   keeps the members inside the shape. Without ASC/DESC the reply is in
//!   that visiting order (cell by cell, by score within a cell), which is
//!   Redis's; with one it is sorted by distance with the same sorts Redis
//!   uses (`ds::csort`), so equal distances come out in Redis's order too.
//!
//! Every search form shares [`search`], which follows Redis's
//! `georadiusGeneric` check for check: the source's type is checked
//! first, then the centre and size, then the options in order (so the
//! first bad option is the one reported), then the option conflicts.
//!
//! STORE / STOREDIST / GEOSEARCHSTORE write a new sorted set (listpack
//! when small, as Redis's `zsetConvertToListpackIfNeeded`). The
//! destination is a key argument ([`keys_georadius`] finds it among the
//! options), so when it lives on another shard than the source, dispatch
//! runs the same handler on copies of both (`crate::scratch`) under the
//! transaction layer's locks: the store is atomic. Such commands are
//! logged as received, as Redis does (they are deterministic).
//!
//! Limits: a search walks at most the members of 9 score ranges of one
//! set and keeps at most the set's size; COUNT bounds the reply, COUNT
//! ANY also the walk.

use engine::lazyfree::Del;
use engine::{Value, ZSet};
use resp::{Args, OwnedArgs, Reply};

use ds::csort;
use ds::geohash::{self, Shape, ShapeKind};

use crate::ctx::ShardCtx;
use crate::error::CmdError;
use crate::table::{flags::*, keys, CommandSpec, Exec, Keys, ShardHandler};
use crate::util::{as_zset, eq_ic, parse_i64};

const R: &[&str] = &["read", "geo", "slow"];
const W: &[&str] = &["write", "geo", "slow"];

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    k: Keys,
    h: ShardHandler,
    acl: &'static [&'static str],
) -> CommandSpec {
    CommandSpec::new(name, arity, flags, k, Exec::Shard(h, None), acl)
}

const K1: Keys = keys(1, 1, 1);
const WRITE_MOVABLE: u32 = WRITE | DENYOOM | MOVABLE_KEYS;

#[rustfmt::skip]
pub(crate) const COMMANDS: &[CommandSpec] = &[
    cmd("geoadd",               -5, WRITE | DENYOOM, K1,            geoadd,               W),
    cmd("geodist",              -4, READONLY,        K1,            geodist,              R),
    cmd("geohash",              -2, READONLY,        K1,            geohash,              R),
    cmd("geopos",               -2, READONLY,        K1,            geopos,               R),
    cmd("georadius",            -6, WRITE_MOVABLE,   K1,            georadius,            W)
        .with_getkeys(keys_georadius),
    cmd("georadius_ro",         -6, READONLY,        K1,            georadius_ro,         R),
    cmd("georadiusbymember",    -5, WRITE_MOVABLE,   K1,            georadiusbymember,    W)
        .with_getkeys(keys_georadiusbymember),
    cmd("georadiusbymember_ro", -5, READONLY,        K1,            georadiusbymember_ro, R),
    cmd("geosearch",            -7, READONLY,        K1,            geosearch,            R),
    cmd("geosearchstore",       -8, WRITE | DENYOOM, keys(1, 2, 1), geosearchstore,       W),
];

// ---------------------------------------------------------------------------
// Key positions of GEORADIUS[BYMEMBER] ... STORE|STOREDIST key

/// GEORADIUS: the source and the destination of STORE / STOREDIST.
fn keys_georadius(args: Args<'_>) -> Vec<usize> {
    store_keys(args, 6)
}

/// GEORADIUSBYMEMBER: as GEORADIUS, its options starting one earlier.
fn keys_georadiusbymember(args: Args<'_>) -> Vec<usize> {
    store_keys(args, 5)
}

/// Redis 7.0's key specs name the key after the first `STORE` and after
/// the first `STOREDIST` found from `start` (the last argument is never
/// taken for a keyword), which is what COMMAND GETKEYS replies. The key
/// the command writes is the one after the *last* such option (Redis's
/// `georadiusGetKeys`, which skips each option's key); when that is
/// another one (the option given twice), it is added so the command runs
/// where its destination lives.
fn store_keys(args: Args<'_>, start: usize) -> Vec<usize> {
    let n = args.len();
    let mut v = vec![1];
    for kw in ["store", "storedist"] {
        if let Some(i) = (start..n.saturating_sub(1)).find(|&i| eq_ic(args.get(i), kw)) {
            v.push(i + 1);
        }
    }
    let mut last = None;
    let mut i = 5;
    while i < n {
        let a = args.get(i);
        if (eq_ic(a, "store") || eq_ic(a, "storedist")) && i + 1 < n {
            last = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    if let Some(k) = last {
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Arguments

/// Redis's `getDoubleFromObject` (`string2d`): the whole argument is a
/// strtod number, not empty, no leading space, no overflow or underflow to
/// zero, not NaN.
fn string2d(arg: &[u8]) -> Option<f64> {
    if arg.is_empty() || matches!(arg[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        return None;
    }
    let (v, n, erange) = crate::zset::strtod(arg);
    if n != arg.len() || v.is_nan() || (erange && (v.is_infinite() || v == 0.0)) {
        return None;
    }
    Some(v)
}

/// A double, or `ERR {msg}` (Redis's `getDoubleFromObjectOrReply`).
fn double_or(arg: &[u8], msg: Option<&str>) -> Result<f64, CmdError> {
    string2d(arg).ok_or_else(|| match msg {
        Some(m) => CmdError::err(m),
        None => CmdError::NotFloat,
    })
}

/// `longitude latitude` within the limits (`extractLongLatOrReply`).
fn lon_lat(args: Args<'_>, at: usize) -> Result<[f64; 2], CmdError> {
    let lon = double_or(args.get(at), None)?;
    let lat = double_or(args.get(at + 1), None)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon)
        || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat)
    {
        // C's "%f,%f".
        return Err(CmdError::err(format!(
            "invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok([lon, lat])
}

/// Metres per unit (`extractUnitOrReply`).
fn unit(arg: &[u8]) -> Result<f64, CmdError> {
    let to_m = if eq_ic(arg, "m") {
        1.0
    } else if eq_ic(arg, "km") {
        1000.0
    } else if eq_ic(arg, "ft") {
        0.3048
    } else if eq_ic(arg, "mi") {
        1609.34
    } else {
        return Err(CmdError::err(
            "unsupported unit provided. please use M, KM, FT, MI",
        ));
    };
    Ok(to_m)
}

/// `radius unit`: the radius and metres per unit (`extractDistanceOrReply`).
fn radius(args: Args<'_>, at: usize) -> Result<(f64, f64), CmdError> {
    let r = double_or(args.get(at), Some("need numeric radius"))?;
    if r < 0.0 {
        return Err(CmdError::err("radius cannot be negative"));
    }
    Ok((r, unit(args.get(at + 1))?))
}

/// `width height unit` (`extractBoxOrReply`).
fn box_size(args: Args<'_>, at: usize) -> Result<(f64, f64, f64), CmdError> {
    let w = double_or(args.get(at), Some("need numeric width"))?;
    let h = double_or(args.get(at + 1), Some("need numeric height"))?;
    if h < 0.0 || w < 0.0 {
        return Err(CmdError::err("height or width cannot be negative"));
    }
    Ok((w, h, unit(args.get(at + 2))?))
}

/// The position of `member` (`longLatFromMember`), or Redis's error.
fn member_pos(z: &ZSet, member: &[u8]) -> Result<[f64; 2], CmdError> {
    z.score(member)
        .map(geohash::decode_score)
        .ok_or_else(|| CmdError::err("could not decode requested zset member"))
}

// ---------------------------------------------------------------------------
// Replies

/// A distance as Redis 7.0.15's `addReplyDoubleDistance`: a bulk string
/// in both protocols, from `fixedpoint_d2string(d, 4)` (which the shipped
/// binary calls instead of the `%.4f` its comments describe).
fn reply_distance(out: &mut Reply, d: f64) {
    out.bulk(fixed4(d).as_bytes());
}

/// Redis's `fixedpoint_d2string(.., 4)`: the value times 10^4 rounded to
/// an integer by `llrint` (the product is rounded first, so a few values
/// print differently from `%.4f`), then printed with 4 decimals. Zero is
/// `0.0000` whatever its sign; a NaN or a product beyond `i64` is
/// `llrint`'s x86-64 answer, `i64::MIN`.
fn fixed4(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    let r = (d * 10_000.0).round_ties_even();
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    let n = if r.is_nan() || !(-TWO63..TWO63).contains(&r) {
        i64::MIN
    } else {
        r as i64
    };
    let sign = if n < 0 { "-" } else { "" };
    let v = n.unsigned_abs();
    format!("{sign}{}.{:04}", v / 10_000, v % 10_000)
}

/// A coordinate as Redis's `addReplyHumanLongDouble`: `%.17Lf` of the
/// value (exact for a double), trailing zeros and dot removed, `-0` as
/// `0`; a bulk string in RESP2, a double in RESP3.
fn reply_coord(out: &mut Reply, d: f64) {
    let mut s = format!("{d:.17}");
    if s.contains('.') {
        let t = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(t);
    }
    if s == "-0" {
        s = "0".into();
    }
    if out.resp3() {
        out.raw(b",");
        out.raw(s.as_bytes());
        out.raw(b"\r\n");
    } else {
        out.bulk(s.as_bytes());
    }
}

// ---------------------------------------------------------------------------
// GEOADD, GEODIST, GEOHASH, GEOPOS

/// GEOADD's arguments as the ZADD Redis runs instead: `zadd key [options]
/// score member ...`, each score the point's 52-bit geohash in decimal.
/// Errors as GEOADD reports them (syntax, then each point in order).
pub(crate) fn as_zadd(args: Args<'_>) -> Result<Vec<Vec<u8>>, CmdError> {
    let (mut nx, mut xx) = (false, false);
    let mut first = 2;
    while first < args.len() {
        let a = args.get(first);
        if eq_ic(a, "nx") {
            nx = true;
        } else if eq_ic(a, "xx") {
            xx = true;
        } else if !eq_ic(a, "ch") {
            break;
        }
        first += 1;
    }
    if !(args.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(CmdError::Syntax);
    }
    let mut v: Vec<Vec<u8>> = Vec::with_capacity(first + (args.len() - first) / 3 * 2);
    v.push(b"zadd".to_vec());
    v.extend(args.iter().skip(1).take(first - 1).map(<[u8]>::to_vec));
    let mut i = first;
    while i < args.len() {
        let [lon, lat] = lon_lat(args, i)?;
        // INVARIANT-free: a point within the limits always encodes.
        let score = geohash::score_of(lon, lat).unwrap_or(0);
        v.push(itoa::Buffer::new().format(score).as_bytes().to_vec());
        v.push(args.get(i + 2).to_vec());
        i += 3;
    }
    Ok(v)
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [...]: ZADD's reply
/// (members added, or with CH added or moved).
fn geoadd(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let zadd = OwnedArgs::from_slices(&as_zadd(args)?);
    crate::zset::zadd(ctx, zadd.args())
}

/// GEODIST key member1 member2 [unit]: the distance as `%.4f`, or null if
/// the key or either member is missing. The unit is checked first.
fn geodist(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let to_m = match args.len() {
        4 => 1.0,
        5 => unit(args.get(4))?,
        _ => return Err(CmdError::Syntax),
    };
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.null();
        return Ok(());
    };
    let z = as_zset(e)?;
    match (z.score(args.get(2)), z.score(args.get(3))) {
        (Some(a), Some(b)) => {
            let [x1, y1] = geohash::decode_score(a);
            let [x2, y2] = geohash::decode_score(b);
            reply_distance(ctx.out, geohash::distance(x1, y1, x2, y2) / to_m);
        }
        _ => ctx.out.null(),
    }
    Ok(())
}

/// GEOHASH key [member ...]: each member's 11-character geohash, null for
/// a missing one (or every one, for a missing key).
fn geohash(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let z = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => Some(as_zset(e)?),
        None => None,
    };
    ctx.out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            Some(s) => ctx.out.bulk(&geohash::geohash_string(s)),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// GEOPOS key [member ...]: each member's `[longitude, latitude]` (the
/// centre of its cell), a null array for a missing one.
fn geopos(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let touch = ctx.touch();
    let z = match ctx.shard.lookup_read(ctx.db, args.get(1), touch) {
        Some(e) => Some(as_zset(e)?),
        None => None,
    };
    ctx.out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            Some(s) => {
                let [lon, lat] = geohash::decode_score(s);
                ctx.out.array(2);
                reply_coord(ctx.out, lon);
                reply_coord(ctx.out, lat);
            }
            None => ctx.out.null_array(),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Searches

/// Which command is searching (Redis's `RADIUS_*` / `GEOSEARCH*` flags).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS[_RO] key longitude latitude radius unit ...
    Coords { ro: bool },
    /// GEORADIUSBYMEMBER[_RO] key member radius unit ...
    Member { ro: bool },
    /// GEOSEARCH key FROMMEMBER|FROMLONLAT BYRADIUS|BYBOX ...
    Search,
    /// GEOSEARCHSTORE dest src ... [STOREDIST]
    SearchStore,
}

impl Form {
    fn search(self) -> bool {
        matches!(self, Form::Search | Form::SearchStore)
    }
    fn may_store(self) -> bool {
        matches!(
            self,
            Form::Coords { ro: false } | Form::Member { ro: false }
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// GEORADIUS key longitude latitude radius M|KM|FT|MI [WITHCOORD]
/// [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key]
/// [STOREDIST key]: the members within the radius (each with the
/// requested extras), or with STORE/STOREDIST the number stored.
fn georadius(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    search(ctx, args, 1, Form::Coords { ro: false })
}

/// GEORADIUS_RO: GEORADIUS without STORE/STOREDIST (a syntax error here).
fn georadius_ro(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    search(ctx, args, 1, Form::Coords { ro: true })
}

/// GEORADIUSBYMEMBER key member radius unit ...: GEORADIUS around a
/// member's position (`could not decode requested zset member` if it is
/// not in the set).
fn georadiusbymember(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    search(ctx, args, 1, Form::Member { ro: false })
}

/// GEORADIUSBYMEMBER_RO: without STORE/STOREDIST.
fn georadiusbymember_ro(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    search(ctx, args, 1, Form::Member { ro: true })
}

/// GEOSEARCH key FROMMEMBER member|FROMLONLAT longitude latitude
/// BYRADIUS radius unit|BYBOX width height unit [ASC|DESC] [COUNT count
/// [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]: as GEORADIUS, in a circle or
/// an axis-aligned box.
fn geosearch(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    search(ctx, args, 1, Form::Search)
}

/// GEOSEARCHSTORE destination source ... [STOREDIST]: GEOSEARCH's result
/// stored at `destination` (scores: geohashes, or with STOREDIST
/// distances in the unit); replies the number stored.
fn geosearchstore(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    search(ctx, args, 2, Form::SearchStore)
}

/// One member found inside the shape (borrowed from the set: a reply
/// copies it once, into the reply).
struct Point<'a> {
    member: &'a [u8],
    lon: f64,
    lat: f64,
    /// Metres while searching; in the request's unit once reported.
    dist: f64,
    score: f64,
}

/// The options after the centre and size, in Redis's order of checks.
struct Opts {
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    any: bool,
    sort: Sort,
    /// 0: no COUNT.
    count: i64,
    /// The destination's argument index, and whether scores are distances.
    store: Option<usize>,
    storedist: bool,
}

/// Redis's `georadiusGeneric`; see the module documentation.
fn search(ctx: &mut ShardCtx<'_>, args: Args<'_>, src: usize, form: Form) -> Result<(), CmdError> {
    let (db, touch) = (ctx.db, ctx.touch());
    let z = match ctx.shard.lookup_read(db, args.get(src), touch) {
        Some(e) => Some(as_zset(e)?),
        None => None,
    };
    let mut center = [0.0, 0.0];
    let mut kind = ShapeKind::Radius(0.0);
    let mut to_m = 1.0;
    let base = match form {
        Form::Coords { .. } => {
            center = lon_lat(args, 2)?;
            let (r, u) = radius(args, 4)?;
            (kind, to_m) = (ShapeKind::Radius(r), u);
            6
        }
        Form::Member { .. } => {
            // A missing key: the member and the radius go unchecked.
            if let Some(z) = z {
                center = member_pos(z, args.get(2))?;
                let (r, u) = radius(args, 3)?;
                (kind, to_m) = (ShapeKind::Radius(r), u);
            }
            5
        }
        Form::Search => 2,
        Form::SearchStore => 3,
    };
    let mut o = Opts {
        withdist: false,
        withhash: false,
        withcoord: false,
        any: false,
        sort: Sort::None,
        count: 0,
        store: (form == Form::SearchStore).then_some(1),
        storedist: false,
    };
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let remaining = args.len().saturating_sub(base);
    let mut i = 0;
    while i < remaining {
        let at = base + i;
        let a = args.get(at);
        if eq_ic(a, "withdist") {
            o.withdist = true;
        } else if eq_ic(a, "withhash") {
            o.withhash = true;
        } else if eq_ic(a, "withcoord") {
            o.withcoord = true;
        } else if eq_ic(a, "any") {
            o.any = true;
        } else if eq_ic(a, "asc") {
            o.sort = Sort::Asc;
        } else if eq_ic(a, "desc") {
            o.sort = Sort::Desc;
        } else if eq_ic(a, "count") && i + 1 < remaining {
            o.count = parse_i64(args.get(at + 1))?;
            if o.count <= 0 {
                return Err(CmdError::err("COUNT must be > 0"));
            }
            i += 1;
        } else if (eq_ic(a, "store") || eq_ic(a, "storedist"))
            && i + 1 < remaining
            && form.may_store()
        {
            o.store = Some(at + 1);
            o.storedist = eq_ic(a, "storedist");
            i += 1;
        } else if eq_ic(a, "storedist") && form == Form::SearchStore {
            o.storedist = true;
        } else if eq_ic(a, "frommember") && i + 1 < remaining && form.search() && !fromloc {
            // A missing key: parsing goes on, the member unchecked.
            if let Some(z) = z {
                center = member_pos(z, args.get(at + 1))?;
            }
            frommember = true;
            i += 1;
        } else if eq_ic(a, "fromlonlat") && i + 2 < remaining && form.search() && !frommember {
            center = lon_lat(args, at + 1)?;
            fromloc = true;
            i += 2;
        } else if eq_ic(a, "byradius") && i + 2 < remaining && form.search() && !bybox {
            let (r, u) = radius(args, at + 1)?;
            (kind, to_m) = (ShapeKind::Radius(r), u);
            byradius = true;
            i += 2;
        } else if eq_ic(a, "bybox") && i + 3 < remaining && form.search() && !byradius {
            let (width, height, u) = box_size(args, at + 1)?;
            (kind, to_m) = (ShapeKind::Box { width, height }, u);
            bybox = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if o.store.is_some() && (o.withdist || o.withhash || o.withcoord) {
        let what = if form == Form::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(CmdError::err(format!(
            "{what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    if form.search() && !(frommember || fromloc) {
        return Err(CmdError::err_echo(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for ",
            args.get(0),
            "",
        ));
    }
    if form.search() && !(byradius || bybox) {
        return Err(CmdError::err_echo(
            "exactly one of BYRADIUS and BYBOX can be specified for ",
            args.get(0),
            "",
        ));
    }
    if o.any && o.count == 0 {
        return Err(CmdError::err("the ANY argument requires COUNT argument"));
    }
    let Some(z) = z else {
        match o.store {
            Some(at) => {
                if ctx.shard.delete(db, args.get(at), Del::Server) {
                    ctx.propagate_as_is(args);
                    ctx.notify(ds::events::GENERIC, "del", args.get(at));
                }
                ctx.out.int(0);
            }
            None => ctx.out.array(0),
        }
        return Ok(());
    };
    // COUNT picks the nearest: it implies ASC unless ANY.
    if o.count != 0 && o.sort == Sort::None && !o.any {
        o.sort = Sort::Asc;
    }
    let shape = Shape { center, to_m, kind };
    let limit = if o.any { o.count as usize } else { 0 };
    let mut found = points_in_cells(z, &shape, limit);
    if found.is_empty() && o.store.is_none() {
        ctx.out.array(0);
        return Ok(());
    }
    let n = if o.count == 0 {
        found.len()
    } else {
        found.len().min(o.count as usize)
    };
    sort_points(&mut found, o.sort, n);
    found.truncate(n);
    for p in &mut found {
        p.dist /= to_m;
    }
    match o.store {
        None => reply_points(ctx.out, &found, &o),
        Some(at) => {
            let event = if form == Form::SearchStore {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            // Copied out of the source, which the store may replace.
            let found: Vec<(Vec<u8>, f64)> = found
                .iter()
                .map(|p| {
                    (
                        p.member.to_vec(),
                        if o.storedist { p.dist } else { p.score },
                    )
                })
                .collect();
            store_points(ctx, (args, args.get(at)), found, event)
        }
    }
    Ok(())
}

/// The members inside `shape`, cell by cell in Redis's order
/// (`membersOfAllNeighbors`); with `limit > 0` (COUNT ANY) the walk stops
/// once that many are found.
fn points_in_cells<'a>(z: &'a ZSet, shape: &Shape, limit: usize) -> Vec<Point<'a>> {
    let cells = geohash::cells_for(shape);
    let within = geohash::Within::new(shape);
    let full = |found: &Vec<Point>| limit > 0 && found.len() >= limit;
    let mut found = Vec::new();
    let mut last = 0;
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_zero() {
            continue;
        }
        // A huge radius makes adjacent neighbours the same cell: skip one
        // equal to the cell visited last (Redis compares with the centre
        // only when it was not the last visited).
        if last != 0 && *cell == cells[last] {
            continue;
        }
        if full(&found) {
            break;
        }
        let (min, max) = geohash::score_range(*cell);
        let (min, max) = (min as f64, max as f64);
        let start = z.partition_point(|_, s| s < min);
        for (m, s) in z.iter_from(start, false) {
            if s >= max {
                break;
            }
            let p = geohash::decode_score(s);
            if let Some(dist) = within.test(p) {
                found.push(Point {
                    member: m,
                    lon: p[0],
                    lat: p[1],
                    dist,
                    score: s,
                });
            }
            if full(&found) {
                break;
            }
        }
        last = i;
    }
    found
}

/// Sorts by distance as Redis does: glibc's `qsort` for the whole result,
/// `pqsort` for its first `n` when COUNT keeps fewer.
fn sort_points(found: &mut Vec<Point>, sort: Sort, n: usize) {
    // Redis's comparators: `a > b` is 1, `a == b` is 0, anything else -1.
    let asc = |a: &Point, b: &Point| {
        if a.dist > b.dist {
            1
        } else if a.dist == b.dist {
            0
        } else {
            -1
        }
    };
    let cmp = |a: &Point, b: &Point| match sort {
        Sort::Desc => -asc(a, b),
        _ => asc(a, b),
    };
    if sort == Sort::None || found.is_empty() {
        return;
    }
    if n == found.len() {
        // The merge sort moves indexes (glibc sorts large elements through
        // pointers too); the points follow.
        let mut idx: Vec<usize> = (0..found.len()).collect();
        csort::merge_sort(&mut idx, |&a, &b| cmp(&found[a], &found[b]));
        let mut taken: Vec<Option<Point>> = std::mem::take(found).into_iter().map(Some).collect();
        // INVARIANT: `idx` is a permutation: each point is taken once.
        found.extend(
            idx.into_iter()
                .map(|i| taken[i].take().expect("permutation")),
        );
    } else {
        csort::partial_quicksort(found, cmp, 0, n - 1);
    }
}

/// The reply of a search without STORE: members, or with any WITH*
/// option an array per member: member, distance, hash, coordinates.
fn reply_points(out: &mut Reply, found: &[Point], o: &Opts) {
    let extras = usize::from(o.withdist) + usize::from(o.withhash) + usize::from(o.withcoord);
    out.array(found.len());
    for p in found {
        if extras > 0 {
            out.array(extras + 1);
        }
        out.bulk(p.member);
        if o.withdist {
            reply_distance(out, p.dist);
        }
        if o.withhash {
            out.int(p.score as i64);
        }
        if o.withcoord {
            out.array(2);
            reply_coord(out, p.lon);
            reply_coord(out, p.lat);
        }
    }
}

/// STORE / STOREDIST / GEOSEARCHSTORE: `dest` becomes a sorted set of the
/// points found, each `(member, score)` with the score to store (geohash
/// or distance) (nothing found deletes it); replies the number stored. Counts
/// one change per member, as Redis's dirty counter.
///
/// Propagated as received (`cmd`) when it changed `dest`.
fn store_points(
    ctx: &mut ShardCtx<'_>,
    (cmd, dest): (Args<'_>, &[u8]),
    found: Vec<(Vec<u8>, f64)>,
    event: &'static str,
) {
    let db = ctx.db;
    let n = found.len();
    if n == 0 {
        if ctx.shard.delete(db, dest, Del::Server) {
            ctx.propagate_as_is(cmd);
            ctx.notify(ds::events::GENERIC, "del", dest);
        }
        ctx.out.int(0);
        return;
    }
    let lim = ctx.shard.enc;
    let longest = found.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
    let mut z = ZSet::with_hint(n, longest, &lim);
    for (m, score) in &found {
        z.insert(m, *score, &lim);
    }
    ctx.shard.store(db, dest, Value::ZSet(Box::new(z)), 0);
    ctx.shard.dbs[db].dirty += n as u64 - 1;
    ctx.propagate_as_is(cmd);
    ctx.out.int(n as i64);
    ctx.notify(ds::events::ZSET, event, dest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    #[test]
    fn store_keys_follow_the_key_specs_and_the_real_destination() {
        let keys = |line: &str| {
            let v: Vec<&str> = line.split(' ').collect();
            let a = OwnedArgs::from_slices(&v);
            if v[0] == "GEORADIUS" {
                keys_georadius(a.args())
            } else {
                keys_georadiusbymember(a.args())
            }
        };
        assert_eq!(keys("GEORADIUS k 0 0 1 km STORE d"), vec![1, 7]);
        assert_eq!(
            keys("GEORADIUS k 0 0 1 km STORE a STOREDIST b"),
            vec![1, 7, 9]
        );
        // The second STORE is the one written.
        assert_eq!(keys("GEORADIUS k 0 0 1 km STORE a STORE b"), vec![1, 7, 9]);
        assert_eq!(keys("GEORADIUSBYMEMBER k m 1 km store d"), vec![1, 6]);
        assert_eq!(keys("GEORADIUS k 0 0 1 km STORE"), vec![1]);
    }

    #[test]
    fn geoadd_runs_as_zadd() {
        let mut t = TestServer::new(1);
        assert_eq!(
            t.run(&["GEOADD", "g", "13.361389", "38.115556", "Palermo"]),
            ":1\r\n"
        );
        assert_eq!(
            t.run(&["ZSCORE", "g", "Palermo"]),
            "$16\r\n3479099956230698\r\n"
        );
        assert_eq!(
            t.run(&["GEOADD", "g", "181", "0", "x"]),
            "-ERR invalid longitude,latitude pair 181.000000,0.000000\r\n"
        );
        assert_eq!(
            t.run(&["GEOADD", "g", "xx", "nx", "1", "2", "x"]),
            "-ERR syntax error\r\n"
        );
    }

    #[test]
    fn distances_print_as_redis_fixed_point() {
        assert_eq!(fixed4(166274.15156960033), "166274.1516");
        assert_eq!(fixed4(0.0), "0.0000");
        assert_eq!(fixed4(-0.0), "0.0000");
        assert_eq!(fixed4(0.00004), "0.0000");
        assert_eq!(fixed4(0.00005), "0.0000");
        assert_eq!(fixed4(0.00015), "0.0001");
        assert_eq!(fixed4(12.5), "12.5000");
        // %.4f prints 0.0003 (the double is just above 0.00025); the
        // product is exactly 2.5 and llrint rounds it to even.
        assert_eq!(format!("{:.4}", 0.00025f64), "0.0003");
        assert_eq!(fixed4(0.00025), "0.0002");
        assert_eq!(fixed4(f64::NAN), "-922337203685477.5808");
        assert_eq!(fixed4(1e300), "-922337203685477.5808");
    }

    #[test]
    fn coordinates_print_as_redis_human_long_doubles() {
        let mut o = Reply::new(false);
        reply_coord(&mut o, 13.361389338970184);
        reply_coord(&mut o, 180.0);
        reply_coord(&mut o, -0.0);
        assert_eq!(
            o.as_bytes(),
            b"$20\r\n13.36138933897018433\r\n$3\r\n180\r\n$1\r\n0\r\n"
        );
        let mut o = Reply::new(true);
        reply_coord(&mut o, 0.5);
        assert_eq!(o.as_bytes(), b",0.5\r\n");
    }
}
