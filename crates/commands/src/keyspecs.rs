//! Redis 7 key specs, evaluated (Redis's `getKeysUsingKeySpecs`): which
//! arguments of a call are keys, each with its spec's flags (`RW`,
//! `access`, `insert` ...). COMMAND GETKEYSANDFLAGS reads them.
//!
//! The specs are Redis's own, from the docs data (`docs_data`), as COMMAND
//! INFO shows them: `begin_search` (an index, or a keyword searched from
//! `startfrom`) then `find_keys` (a range `lastkey`/`keystep`/`limit`, or
//! a count at `keynumidx` then `firstkey`/`keystep`). A spec Redis marks
//! incomplete, or one this evaluation cannot follow, makes the caller fall
//! back on the command table's own key positions.
//!
//! Not on the request path.

use resp::Args;

/// A RESP3 value of the docs data.
#[derive(Debug)]
enum V {
    Str(String),
    Int(i64),
    List(Vec<V>),
    Map(Vec<(V, V)>),
    Null,
}

impl V {
    fn get(&self, key: &str) -> Option<&V> {
        match self {
            V::Map(kv) => kv
                .iter()
                .find(|(k, _)| matches!(k, V::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
    fn int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            V::Int(n) => Some(*n),
            _ => None,
        }
    }
    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            V::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Parses one value at `b[0]`; returns it and its length.
fn parse(b: &[u8]) -> Option<(V, usize)> {
    let nl = b.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&b[1..nl]).ok()?;
    let hdr = nl + 2;
    Some(match *b.first()? {
        b'$' => {
            let n: usize = line.parse().ok()?;
            let s = std::str::from_utf8(b.get(hdr..hdr + n)?).ok()?;
            (V::Str(s.to_string()), hdr + n + 2)
        }
        b'+' => (V::Str(line.to_string()), hdr),
        b':' => (V::Int(line.parse().ok()?), hdr),
        b'*' | b'~' | b'%' => {
            let n: usize = line.parse().ok()?;
            let items = if b[0] == b'%' { 2 * n } else { n };
            let mut p = hdr;
            let mut v = Vec::with_capacity(items);
            for _ in 0..items {
                let (x, l) = parse(&b[p..])?;
                v.push(x);
                p += l;
            }
            if b[0] == b'%' {
                let mut kv = Vec::with_capacity(n);
                let mut it = v.into_iter();
                while let (Some(k), Some(x)) = (it.next(), it.next()) {
                    kv.push((k, x));
                }
                (V::Map(kv), p)
            } else {
                (V::List(v), p)
            }
        }
        _ => (V::Null, hdr),
    })
}

fn flags_of(spec: &V) -> Vec<String> {
    match spec.get("flags") {
        Some(V::List(f)) => f
            .iter()
            .filter_map(|x| match x {
                V::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The flags of the first spec in `specs` (the flags the fallback gives
/// every key).
pub fn first_flags(specs: &[u8]) -> Vec<String> {
    match parse(specs) {
        Some((V::List(v), _)) => v.first().map(flags_of).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The flags Redis's native key functions give key `pos` of `args` for
/// the commands whose key specs say `variable_flags` or `incomplete`
/// (`setGetKeys`, `bitfieldGetKeys`, `sortGetKeys`).
pub fn native_flags(name: &str, args: Args<'_>, pos: usize) -> Vec<String> {
    let v = |f: &[&str]| f.iter().map(|s| s.to_string()).collect();
    let eq = |i: usize, w: &str| args.get(i).eq_ignore_ascii_case(w.as_bytes());
    match name {
        "set" => {
            if (3..args.len()).any(|i| eq(i, "get")) {
                v(&["RW", "access", "update"])
            } else {
                v(&["OW", "update"])
            }
        }
        "bitfield" => {
            let mut readonly = true;
            let mut i = 2;
            while i < args.len() {
                let rem = args.len() - i - 1;
                if eq(i, "get") && rem >= 2 {
                    i += 2;
                } else if (eq(i, "set") || eq(i, "incrby")) && rem >= 3 {
                    readonly = false;
                    break;
                } else if eq(i, "overflow") && rem >= 1 {
                    i += 1;
                } else {
                    readonly = false;
                    break;
                }
                i += 1;
            }
            if readonly {
                v(&["RO", "access"])
            } else {
                v(&["RW", "access", "update"])
            }
        }
        // SORT: the source is read, a STORE destination overwritten.
        _ if pos == 1 => v(&["RO", "access"]),
        _ => v(&["OW", "update"]),
    }
}

/// A key found by the specs: its argument position and its spec's flags.
pub type KeyFlags = (usize, Vec<String>);

/// Redis's `getKeysUsingKeySpecs` over `specs` (the RESP3 array COMMAND
/// INFO shows) for the call `args` (the command name at 0). `None` where
/// Redis would fall back on the command's own key function (an
/// incomplete or unknown spec, a count that does not parse).
pub fn keys_with_flags(specs: &[u8], args: Args<'_>) -> Option<Vec<KeyFlags>> {
    let (V::List(specs), _) = parse(specs)? else {
        return None;
    };
    let argc = args.len() as i64;
    let mut out = Vec::new();
    for spec in &specs {
        let flags = flags_of(spec);
        if flags.iter().any(|f| f == "not_key") {
            continue;
        }
        if flags
            .iter()
            .any(|f| f == "incomplete" || f == "variable_flags")
        {
            return None;
        }
        let bs = spec.get("begin_search")?;
        let bs_spec = bs.get("spec")?;
        let mut first = match bs.str("type")? {
            "index" => bs_spec.int("index")?,
            "keyword" => {
                let kw = bs_spec.str("keyword")?;
                let from = bs_spec.int("startfrom")?;
                let (start, end) = if from > 0 {
                    (from, argc - 1)
                } else {
                    (argc + from, 1)
                };
                let mut found = 0;
                let mut i = start;
                loop {
                    if i >= argc || i < 1 {
                        break;
                    }
                    if args.get(i as usize).eq_ignore_ascii_case(kw.as_bytes()) {
                        found = i + 1;
                        break;
                    }
                    if i == end {
                        break;
                    }
                    i = if start <= end { i + 1 } else { i - 1 };
                }
                if found == 0 {
                    continue;
                }
                found
            }
            _ => return None,
        };
        let fk = spec.get("find_keys")?;
        let fk_spec = fk.get("spec")?;
        let (last, step) = match fk.str("type")? {
            "range" => {
                let lastkey = fk_spec.int("lastkey")?;
                let limit = fk_spec.int("limit")?;
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (last, fk_spec.int("keystep")?)
            }
            "keynum" => {
                let idx = fk_spec.int("keynumidx")?;
                if idx >= argc - first {
                    return None;
                }
                let n = resp::string2ll(args.get((first + idx) as usize)).filter(|&n| n >= 0)?;
                first += fk_spec.int("firstkey")?;
                (first + n - 1, fk_spec.int("keystep")?)
            }
            _ => return None,
        };
        if last >= argc || last < first || first >= argc || step <= 0 {
            return None;
        }
        let mut i = first;
        while i <= last {
            out.push((i as usize, flags.clone()));
            i += step;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(flags: &str, bs: &str, fk: &str) -> String {
        format!("%3\r\n$5\r\nflags\r\n{flags}$12\r\nbegin_search\r\n{bs}$9\r\nfind_keys\r\n{fk}")
    }

    #[test]
    fn index_range_keyword_keynum() {
        let rw = "~2\r\n+RW\r\n+access\r\n";
        let index1 = "%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n";
        let all = "%2\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:-1\r\n\
                   $7\r\nkeystep\r\n:2\r\n$5\r\nlimit\r\n:0\r\n";
        let specs = format!("*1\r\n{}", spec(rw, index1, all));
        let a = resp::OwnedArgs::from_slices(&[b"mset".as_slice(), b"a", b"1", b"b", b"2"]);
        let got = keys_with_flags(specs.as_bytes(), a.args()).unwrap();
        assert_eq!(got.iter().map(|k| k.0).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(got[0].1, ["RW", "access"]);
        let kw = "%2\r\n$4\r\ntype\r\n$7\r\nkeyword\r\n$4\r\nspec\r\n%2\r\n$7\r\nkeyword\r\n\
                  $4\r\nKEYS\r\n$9\r\nstartfrom\r\n:1\r\n";
        let num =
            "%2\r\n$4\r\ntype\r\n$6\r\nkeynum\r\n$4\r\nspec\r\n%3\r\n$9\r\nkeynumidx\r\n:0\r\n\
                   $8\r\nfirstkey\r\n:1\r\n$7\r\nkeystep\r\n:1\r\n";
        let specs = format!("*1\r\n{}", spec(rw, kw, num));
        let a = resp::OwnedArgs::from_slices(&[b"x".as_slice(), b"y", b"keys", b"2", b"k1", b"k2"]);
        let got = keys_with_flags(specs.as_bytes(), a.args()).unwrap();
        assert_eq!(got.iter().map(|k| k.0).collect::<Vec<_>>(), [4, 5]);
        // A count past the arguments is a fallback, not a panic.
        let a = resp::OwnedArgs::from_slices(&[b"x".as_slice(), b"keys", b"9", b"k1"]);
        assert!(keys_with_flags(specs.as_bytes(), a.args()).is_none());
    }
}
