//! `CONFIG GET` and `CONFIG SET` over the directive table.
//!
//! # What this module owns
//!
//! [`config_get`] (exact names and Redis's `stringmatchlen` glob patterns, each directive once,
//! in table order) and [`config_set`] (atomic: every pair checked on a copy before the live
//! config changes), with Redis 7.0's exact error lines.
//!
//! # Why it is a module of its own
//!
//! These are the runtime entry points, with their own rules (mutability, protected configs,
//! duplicates, aliases echoed as typed) on top of the table's parsers; the glob matcher is here
//! because only `CONFIG GET` uses it.

use crate::directives::{
    lookup,
    Runtime::{Fixed, Immutable, Protected},
    DIRECTIVES,
};
use crate::Config;

/// `CONFIG GET pattern [pattern ...]`: `(name, value)` for every directive matching any
/// pattern, each directive once, in table order.
///
/// A pattern without `*`, `?` or `[` is an exact, case-insensitive name or alias and is echoed
/// back as typed (Redis 7.0 replies `PORT` to `CONFIG GET PORT`). A glob pattern (Redis's
/// `stringmatchlen`, case-insensitive) is tried on the name, then the alias, and the name that
/// matched is returned. Values are bytes: `requirepass` and paths are binary-safe.
/// Complexity: O(patterns × table × pattern length).
pub fn config_get(cfg: &Config, patterns: &[&[u8]]) -> Vec<(String, Vec<u8>)> {
    // Per directive, the name and the alias: each is listed when a pattern
    // matches it (Redis's table holds aliases as entries of their own, so
    // `*of` gives both `replicaof` and `slaveof`), once. Tessera's own
    // aliases are found by name only: Redis has no such entries.
    let mut hits: Vec<[Option<String>; 2]> = vec![[None, None]; DIRECTIVES.len()];
    for pat in patterns {
        if !pat.iter().any(|b| matches!(b, b'*' | b'?' | b'[')) {
            if let Some(i) = lookup(pat) {
                let alias = DIRECTIVES[i]
                    .alias
                    .is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(pat));
                // lookup() matched an ASCII name, so the pattern is ASCII.
                hits[i][usize::from(alias)]
                    .get_or_insert_with(|| String::from_utf8_lossy(pat).into_owned());
            }
            continue;
        }
        for (i, d) in DIRECTIVES.iter().enumerate().filter(|(_, d)| !d.hidden) {
            let alias = d.alias.filter(|a| !TESSERA_ALIASES.contains(a));
            for (k, n) in std::iter::once(d.name).chain(alias).enumerate() {
                if hits[i][k].is_none() && glob_match(pat, n.as_bytes()) {
                    hits[i][k] = Some(n.to_string());
                }
            }
        }
    }
    hits.into_iter()
        .zip(DIRECTIVES)
        .flat_map(|(names, d)| {
            names
                .into_iter()
                .flatten()
                .map(move |n| (n, d.kind.get(cfg)))
        })
        .collect()
}

/// Aliases Redis does not have (its own aliases are Redis's old names).
const TESSERA_ALIASES: &[&str] = &["threads", "server-cpulist"];

/// `CONFIG SET name value [name value ...]`, atomically: all pairs are checked (unknown name,
/// immutable, duplicate — first failure wins — then each value in order) against a copy, and
/// `cfg` changes only if all succeed.
///
/// `Err` is Redis 7's exact error line without the leading `-`, e.g.
/// `ERR Unknown option or number of arguments for CONFIG SET - 'foo'` or
/// `ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed
/// into an integer`. As in Redis, lookup errors quote the name as typed and value errors quote
/// the name found, lowercase (the alias if one was typed). The caller enforces the command's
/// arity (an even, non-zero count).
pub fn config_set(cfg: &mut Config, pairs: &[(&[u8], &[u8])]) -> Result<(), String> {
    let failed = |name: &str, why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    let mut chosen: Vec<usize> = Vec::with_capacity(pairs.len());
    for &(name, value) in pairs {
        let typed = String::from_utf8_lossy(name);
        let Some(i) = lookup(name) else {
            return Err(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{typed}'"
            ));
        };
        let d = &DIRECTIVES[i];
        if d.runtime == Immutable || (d.runtime == Fixed && d.kind.get(cfg) != value) {
            return Err(failed(&typed, "can't set immutable config"));
        }
        if DIRECTIVES[i].runtime == Protected {
            return Err(failed(&typed, "can't set protected config"));
        }
        if chosen.contains(&i) {
            return Err(failed(&typed, "duplicate parameter"));
        }
        chosen.push(i);
    }
    let mut next = cfg.clone();
    for (&i, (typed, value)) in chosen.iter().zip(pairs) {
        let d = &DIRECTIVES[i];
        let kind = &d.kind;
        // Redis names the entry it found: the alias when one was typed.
        let shown = match d.alias {
            Some(a) if typed.eq_ignore_ascii_case(a.as_bytes()) => a,
            _ => d.name,
        };
        // Redis's performInterfaceSet splits multi-arg values on single spaces.
        let args: Vec<Vec<u8>> = if kind.is_multi_arg() {
            if value.is_empty() {
                Vec::new()
            } else {
                value.split(|&b| b == b' ').map(<[u8]>::to_vec).collect()
            }
        } else {
            vec![value.to_vec()]
        };
        kind.set(&mut next, &args)
            .map_err(|why| failed(shown, &why))?;
    }
    *cfg = next;
    Ok(())
}

/// Redis's `stringmatchlen(pattern, string, nocase = 1)`: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`
/// and `\` escapes. Exponential blow-up is cut by Redis's `skipLongerMatches` and its nesting
/// limit, so it is O(pattern × string) here.
fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    glob_rec(pattern, string, &mut skip_longer, 0)
}

fn glob_rec(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: u32) -> bool {
    // Redis's limit on recursion (one level per `*`).
    if nesting > 1000 {
        return false;
    }
    let lower = |b: u8| b.to_ascii_lowercase();
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if glob_rec(&p[1..], s, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let negate = p.first() == Some(&b'^');
                if negate {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    if p.len() >= 2 && p[0] == b'\\' {
                        p = &p[1..];
                        // Redis compares escaped class members case-sensitively.
                        if p[0] == s[0] {
                            matched = true;
                        }
                    } else if p.is_empty() {
                        // Unterminated class: Redis stops at the end of the pattern.
                        break;
                    } else if p[0] == b']' {
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (mut lo, mut hi) = (p[0], p[2]);
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        let c = lower(s[0]);
                        if c >= lower(lo) && c <= lower(hi) {
                            matched = true;
                        }
                        p = &p[2..];
                    } else if lower(p[0]) == lower(s[0]) {
                        matched = true;
                    }
                    p = &p[1..];
                }
                if matched == negate {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                let c = if c == b'\\' && p.len() >= 2 {
                    p = &p[1..];
                    p[0]
                } else {
                    c
                };
                if lower(c) != lower(s[0]) {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = p.get(1..).unwrap_or_default();
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests;
