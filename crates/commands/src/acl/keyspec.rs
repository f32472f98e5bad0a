//! Which arguments of a command are keys, and whether the command reads
//! or writes each: what `%R~` / `%W~` patterns are checked against.
//!
//! Redis's key specs (begin-search + find-keys + flags), taken from the
//! metadata `docs` serves (Redis 7.0.15's own), are parsed once into
//! [`Spec`]s per command id. Finding the keys of one call follows Redis's
//! `getKeysFromCommandWithSpecs`: the specs when they are complete and
//! their flags fixed; otherwise the command's own rule (Redis's native
//! `getkeys_proc`: SET with GET, BITFIELD with SET/INCRBY, SORT's STORE,
//! MIGRATE's KEYS), or the table's key positions read and written.
//!
//! Only restricted users (not `allkeys`) ever get here.

use std::sync::OnceLock;

use resp::Args;

use super::rules::{KEY_READ, KEY_WRITE};
use crate::table::registry;

// Key spec flags (Redis's CMD_KEY_*), only those ACL and the search need.
const ACCESS: u16 = 1 << 0;
const UPDATE: u16 = 1 << 1;
const INSERT: u16 = 1 << 2;
const DELETE: u16 = 1 << 3;
const NOT_KEY: u16 = 1 << 4;
const INCOMPLETE: u16 = 1 << 5;
const VARIABLE_FLAGS: u16 = 1 << 6;

#[derive(Clone, Debug)]
enum Begin {
    Index(i64),
    Keyword(Vec<u8>, i64),
    Unknown,
}

#[derive(Clone, Debug)]
enum Find {
    Range { last: i64, step: i64, limit: i64 },
    Keynum { idx: i64, first: i64, step: i64 },
    Unknown,
}

#[derive(Clone, Debug)]
struct Spec {
    flags: u16,
    begin: Begin,
    find: Find,
}

/// A parsed RESP3 value of the stored metadata.
#[derive(Debug)]
enum V {
    Str(Vec<u8>),
    Int(i64),
    List(Vec<V>),
}

/// Parses one RESP3 value at `b`; returns it and its length. Maps come out
/// as flat lists (key, value, ...). The data is generated and trusted; a
/// malformed tail yields empty values, never a panic.
fn parse(b: &[u8]) -> (V, usize) {
    let Some(nl) = b.iter().position(|&c| c == b'\n') else {
        return (V::List(Vec::new()), b.len());
    };
    let line = &b[1..nl.saturating_sub(1).max(1)];
    let n: i64 = std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let hdr = nl + 1;
    match b.first() {
        Some(b'$') => {
            let n = n.max(0) as usize;
            let end = (hdr + n).min(b.len());
            (V::Str(b[hdr..end].to_vec()), (end + 2).min(b.len()))
        }
        Some(b'+') => (V::Str(line.to_vec()), hdr),
        Some(b':') => (V::Int(n), hdr),
        Some(b'*' | b'~' | b'%') => {
            let items = if b[0] == b'%' { 2 * n } else { n };
            let mut p = hdr;
            let mut v = Vec::new();
            for _ in 0..items.max(0) {
                if p >= b.len() {
                    break;
                }
                let (x, l) = parse(&b[p..]);
                v.push(x);
                p += l;
            }
            (V::List(v), p)
        }
        _ => (V::List(Vec::new()), hdr),
    }
}

fn field<'v>(m: &'v [V], name: &str) -> Option<&'v V> {
    m.chunks(2).find_map(|kv| match kv {
        [V::Str(k), v] if k == name.as_bytes() => Some(v),
        _ => None,
    })
}

fn int(m: &[V], name: &str) -> i64 {
    match field(m, name) {
        Some(V::Int(n)) => *n,
        _ => 0,
    }
}

fn spec_of(v: &V) -> Option<Spec> {
    let V::List(m) = v else { return None };
    let mut flags = 0;
    if let Some(V::List(fs)) = field(m, "flags") {
        for f in fs {
            if let V::Str(f) = f {
                flags |= match f.as_slice() {
                    b"access" => ACCESS,
                    b"update" => UPDATE,
                    b"insert" => INSERT,
                    b"delete" => DELETE,
                    b"not_key" => NOT_KEY,
                    b"incomplete" => INCOMPLETE,
                    b"variable_flags" => VARIABLE_FLAGS,
                    _ => 0,
                };
            }
        }
    }
    let typed = |name: &str| -> Option<(Vec<u8>, Vec<V>)> {
        let V::List(t) = field(m, name)? else {
            return None;
        };
        let ty = match field(t, "type")? {
            V::Str(s) => s.clone(),
            _ => return None,
        };
        let spec = match field(t, "spec") {
            Some(V::List(s)) => s.iter().map(clone_v).collect(),
            _ => Vec::new(),
        };
        Some((ty, spec))
    };
    let (bt, bs) = typed("begin_search")?;
    let begin = match bt.as_slice() {
        b"index" => Begin::Index(int(&bs, "index")),
        b"keyword" => match field(&bs, "keyword") {
            Some(V::Str(k)) => Begin::Keyword(k.clone(), int(&bs, "startfrom")),
            _ => Begin::Unknown,
        },
        _ => Begin::Unknown,
    };
    let (ft, fs) = typed("find_keys")?;
    let find = match ft.as_slice() {
        b"range" => Find::Range {
            last: int(&fs, "lastkey"),
            step: int(&fs, "keystep"),
            limit: int(&fs, "limit"),
        },
        b"keynum" => Find::Keynum {
            idx: int(&fs, "keynumidx"),
            first: int(&fs, "firstkey"),
            step: int(&fs, "keystep"),
        },
        _ => Find::Unknown,
    };
    Some(Spec { flags, begin, find })
}

fn clone_v(v: &V) -> V {
    match v {
        V::Str(s) => V::Str(s.clone()),
        V::Int(n) => V::Int(*n),
        V::List(l) => V::List(l.iter().map(clone_v).collect()),
    }
}

/// Every command's specs, by registry id.
fn specs() -> &'static [Vec<Spec>] {
    static SPECS: OnceLock<Vec<Vec<Spec>>> = OnceLock::new();
    SPECS.get_or_init(|| {
        registry()
            .specs
            .iter()
            .map(|(name, _, _)| {
                let Some(raw) = crate::docs::key_specs_raw(name) else {
                    return Vec::new();
                };
                match parse(raw).0 {
                    V::List(l) => l.iter().filter_map(spec_of).collect(),
                    _ => Vec::new(),
                }
            })
            .collect()
    })
}

/// The ACL permission a key spec's flags need.
fn perm(flags: u16) -> u8 {
    let mut p = 0;
    if flags & ACCESS != 0 {
        p |= KEY_READ;
    }
    if flags & (INSERT | DELETE | UPDATE) != 0 {
        p |= KEY_WRITE;
    }
    p
}

/// Redis's `getKeysUsingKeySpecs`; `false` when a spec cannot say (an
/// unknown or incomplete spec, a bad key count), as Redis's -1.
fn by_specs(specs: &[Spec], args: Args<'_>, out: &mut Vec<(usize, u8)>) -> bool {
    let argc = args.len() as i64;
    for s in specs {
        if s.flags & NOT_KEY != 0 {
            continue;
        }
        let mut first = match &s.begin {
            Begin::Index(i) => *i,
            Begin::Keyword(kw, from) => {
                let (start, end) = if *from > 0 {
                    (*from, argc - 1)
                } else {
                    (argc + from, 1)
                };
                let mut found = 0;
                let mut i = start;
                while i != end {
                    if i >= argc || i < 1 {
                        break;
                    }
                    if args.get(i as usize).eq_ignore_ascii_case(kw) {
                        found = i + 1;
                        break;
                    }
                    i += if start <= end { 1 } else { -1 };
                }
                if found == 0 {
                    continue;
                }
                found
            }
            Begin::Unknown => return false,
        };
        let (last, step) = match s.find {
            Find::Range { last, step, limit } => {
                let l = if last >= 0 {
                    first + last
                } else if limit == 0 {
                    argc + last
                } else {
                    first + ((argc - first) / limit + last)
                };
                (l, step)
            }
            Find::Keynum {
                idx,
                first: f,
                step,
            } => {
                if idx >= argc || first + idx >= argc {
                    return false;
                }
                let Some(n) = resp::string2ll(args.get((first + idx) as usize)) else {
                    return false;
                };
                if n < 0 {
                    return false;
                }
                first += f;
                (first + n - 1, step)
            }
            Find::Unknown => return false,
        };
        if last >= argc || last < first || first >= argc {
            return false;
        }
        let mut i = first;
        while i <= last {
            out.push((i as usize, perm(s.flags)));
            i += step.max(1);
        }
        if s.flags & INCOMPLETE != 0 {
            return false;
        }
    }
    true
}

/// The keys of this call of command `id` with the permission each needs
/// (`KEY_READ` / `KEY_WRITE` bits), in Redis's order.
pub fn keys(id: usize, args: Args<'_>, out: &mut Vec<(usize, u8)>) {
    out.clear();
    let specs = &specs()[id];
    let varflags = specs.iter().any(|s| s.flags & VARIABLE_FLAGS != 0);
    if !specs.is_empty() && !varflags && by_specs(specs, args, out) {
        return;
    }
    out.clear();
    let reg = registry();
    let spec = reg.specs[id].1;
    let rw = KEY_READ | KEY_WRITE;
    match reg.specs[id].0.as_str() {
        // Redis's setGetKeys: GET makes it read the old value.
        "set" => {
            let get = (3..args.len()).any(|i| args.get(i).eq_ignore_ascii_case(b"get"));
            out.push((1, if get { rw } else { KEY_WRITE }));
        }
        // bitfieldGetKeys: read-only unless a SET / INCRBY (or bad syntax).
        "bitfield" => {
            let mut ro = true;
            let mut i = 2;
            while i < args.len() {
                let rem = args.len() - i - 1;
                let a = args.get(i);
                if a.eq_ignore_ascii_case(b"get") && rem >= 2 {
                    i += 2;
                } else if a.eq_ignore_ascii_case(b"overflow") && rem >= 1 {
                    i += 1;
                } else {
                    ro = false;
                    break;
                }
                i += 1;
            }
            out.push((1, if ro { KEY_READ } else { rw }));
        }
        name => {
            let mut pos = Vec::new();
            spec.key_positions(args, &mut pos);
            for (n, p) in pos.into_iter().enumerate() {
                let need = match name {
                    // sortGetKeys: the source is read, STORE's key written.
                    "sort" if n > 0 => KEY_WRITE,
                    "sort" | "sort_ro" => KEY_READ,
                    _ => rw,
                };
                out.push((p, need));
            }
        }
    }
}

/// Whether command `id` names keys at all (Redis's `doesCommandHaveKeys`).
pub fn has_keys(id: usize) -> bool {
    let reg = registry();
    let spec = reg.specs[id].1;
    spec.getkeys.is_some()
        || spec.keys.first > 0
        || specs()[id].iter().any(|s| s.flags & NOT_KEY == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use resp::OwnedArgs;

    fn of(argv: &[&str]) -> Vec<(usize, u8)> {
        let owned = OwnedArgs::from_slices(
            &argv
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        );
        let r = registry().resolve(owned.args()).unwrap();
        let mut out = Vec::new();
        keys(r.id, owned.args(), &mut out);
        out
    }

    const R: u8 = KEY_READ;
    const W: u8 = KEY_WRITE;

    #[test]
    fn keys_and_their_permissions() {
        assert_eq!(of(&["get", "k"]), vec![(1, R)]);
        assert_eq!(of(&["set", "k", "v"]), vec![(1, W)]);
        assert_eq!(of(&["set", "k", "v", "GET"]), vec![(1, R | W)]);
        assert_eq!(of(&["copy", "a", "b"]), vec![(1, R), (2, W)]);
        assert_eq!(
            of(&["lmove", "a", "b", "left", "right"]),
            vec![(1, R | W), (2, W)]
        );
        assert_eq!(of(&["mset", "a", "1", "b", "2"]), vec![(1, W), (3, W)]);
        assert_eq!(of(&["del", "a", "b"]), vec![(1, W), (2, W)]);
        assert_eq!(
            of(&["eval", "s", "2", "a", "b", "x"]),
            vec![(3, R | W), (4, R | W)]
        );
        assert_eq!(
            of(&["xread", "count", "1", "streams", "a", "b", "0", "0"]),
            vec![(4, R), (5, R)]
        );
        assert_eq!(of(&["bitfield", "k", "get", "u8", "0"]), vec![(1, R)]);
        assert_eq!(
            of(&["bitfield", "k", "set", "u8", "0", "1"]),
            vec![(1, R | W)]
        );
        assert_eq!(of(&["sort", "k", "store", "d"]), vec![(1, R), (3, W)]);
        assert!(has_keys(registry().lookup_full(b"get").unwrap()));
        assert!(!has_keys(registry().lookup_full(b"ping").unwrap()));
    }
}
