//! Which commands a script's code can name: the proof EXEC reads before
//! it locks a block that queues a script (`multi`, `script::needs_every`).
//!
//! # Why
//!
//! A script inside MULTI/EXEC cannot run again under wider locks (the
//! block's earlier commands ran, their effects are out), so EXEC must
//! know *before* it locks whether a queued script may call a
//! keyspace-wide command (KEYS, SCAN, DBSIZE, RANDOMKEY, FLUSHDB,
//! FLUSHALL, SWAPDB): those need every shard, which the block then locks
//! whole (`script::every`). Reading string literals for those names
//! missed a name built at run time (`redis.call(ARGV[1], '*')`,
//! `redis.call(string.upper('k'..'eys'))`), and such a script was refused
//! its first time where Redis runs it.
//!
//! So the question is turned around: EXEC takes every shard unless the
//! code *proves* that each command it can call is named by a literal that
//! is not keyspace-wide ([`only_named_calls`]). A conservative reading of
//! the tokens: every use of the global `redis` is a field access
//! `redis.NAME`; `redis.call` and `redis.pcall` are called at once, their
//! first argument a plain string literal followed by `,` or `)`; and no
//! name appears that reaches the globals or runs code from a string
//! (`_G`, `getfenv`, `loadstring`, `debug` ...), through which `redis`
//! could be reached unseen. Anything else (an alias `local c =
//! redis.call`, `pcall(redis.call, ...)`, a name in a variable, an escape
//! in the literal) is "not proven", and the block locks every shard.
//!
//! # Rejected
//!
//! - Running such a script under the block's key locks and, at its first
//!   keyspace call, running the whole block again under every shard's
//!   locks: the block's earlier commands have written, published
//!   keyspace events and invalidations, and counted their statistics by
//!   then, and a script inside EXEC would have to keep take-back copies
//!   of everything it writes (`wide`'s journal: ~700 instructions for a
//!   two-command script) on every run, for a case that may never come.
//! - Every shard for every block with a script: a MULTI with a one-key
//!   script would stop every shard.
//!
//! # Cost
//!
//! One pass over the code per script (or library) and process lifetime:
//! the answer is kept in the script's mark (`cache::HopMark`), so EXEC
//! reads a bit where it scanned the body for literals at each EXEC before.

/// The keyspace-wide commands (`keys::script::handles`).
const KEYSPACE: [&str; 7] = [
    "keys",
    "scan",
    "dbsize",
    "randomkey",
    "flushdb",
    "flushall",
    "swapdb",
];

/// Names through which the global table (so `redis`) or code from a
/// string can be reached without naming `redis` where we look.
const ESCAPES: [&str; 14] = [
    "_G",
    "getfenv",
    "setfenv",
    "loadstring",
    "load",
    "loadfile",
    "dofile",
    "require",
    "module",
    "package",
    "debug",
    "rawget",
    "getmetatable",
    "newproxy",
];

/// Whether `name` (a command's name, any case) is keyspace-wide.
pub(crate) fn is_keyspace(name: &[u8]) -> bool {
    KEYSPACE
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tok<'a> {
    Name(&'a [u8]),
    /// A short string literal's contents; `plain`: without escapes.
    Str {
        text: &'a [u8],
        plain: bool,
    },
    /// A long string (`[[...]]`), a number, or other literal.
    Other,
    Punct(&'a [u8]),
}

/// Lua 5.1's tokens, comments and whitespace skipped; `None` for code that
/// does not tokenize (an unterminated string or comment: not proven).
fn tokens(code: &[u8]) -> Option<Vec<Tok<'_>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = code.len();
    while i < n {
        let c = code[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && code.get(i + 1) == Some(&b'-') {
            i += 2;
            if let Some(end) = long_bracket(code, i) {
                i = end?;
            } else {
                while i < n && code[i] != b'\n' {
                    i += 1;
                }
            }
            continue;
        }
        if c == b'[' {
            if let Some(end) = long_bracket(code, i) {
                i = end?;
                out.push(Tok::Other);
                continue;
            }
        }
        if c == b'\'' || c == b'"' {
            let start = i + 1;
            let mut j = start;
            let mut plain = true;
            loop {
                match code.get(j) {
                    None | Some(b'\n') => return None,
                    Some(b'\\') => {
                        plain = false;
                        j += 2;
                    }
                    Some(&q) if q == c => break,
                    Some(_) => j += 1,
                }
            }
            out.push(Tok::Str {
                text: &code[start..j],
                plain,
            });
            i = j + 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < n && (code[i].is_ascii_alphanumeric() || code[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(&code[start..i]));
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && code.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            // A number: digits, letters (hex, exponent), dots, and a sign
            // after an exponent.
            i += 1;
            while i < n {
                let d = code[i];
                let signed = (d == b'+' || d == b'-') && matches!(code[i - 1], b'e' | b'E');
                if d.is_ascii_alphanumeric() || d == b'.' || signed {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Tok::Other);
            continue;
        }
        // `...` and `..` are one token each (a lone `.` is a field access).
        let len = if code[i..].starts_with(b"...") {
            3
        } else if code[i..].starts_with(b"..") {
            2
        } else {
            1
        };
        out.push(Tok::Punct(&code[i..i + len]));
        i += len;
    }
    Some(out)
}

/// At `code[i] == '['`: a long bracket `[=*[`, returning `Some(end)` with
/// the index past its closing `]=*]` (`None` inside: unterminated), or
/// `None` when `[` opens no long bracket.
fn long_bracket(code: &[u8], i: usize) -> Option<Option<usize>> {
    if code.get(i) != Some(&b'[') {
        return None;
    }
    let level = code[i + 1..].iter().take_while(|&&c| c == b'=').count();
    if code.get(i + 1 + level) != Some(&b'[') {
        return None;
    }
    let body = i + 2 + level;
    let mut close = Vec::with_capacity(level + 2);
    close.push(b']');
    close.extend(std::iter::repeat_n(b'=', level));
    close.push(b']');
    Some(
        code[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map(|p| body + p + close.len()),
    )
}

/// Whether `code` provably calls commands only through `redis.call` or
/// `redis.pcall` (or a local alias of one, `local rcall = redis.call`, as
/// BullMQ's scripts open) with a plain string literal naming a command
/// that is not keyspace-wide (see the module documentation). False when
/// not proven.
pub(crate) fn only_named_calls(code: &[u8]) -> bool {
    let Some(toks) = tokens(code) else {
        return false;
    };
    // `local NAME = redis.call` (or `pcall`), the statement ending there:
    // NAME is an alias, each of its uses checked as a call.
    let mut aliases: Vec<&[u8]> = Vec::new();
    let mut declared: Vec<usize> = Vec::new();
    for i in 0..toks.len() {
        if let [Tok::Name(b"local"), Tok::Name(name), Tok::Punct(b"="), Tok::Name(b"redis"), Tok::Punct(b"."), Tok::Name(b"call" | b"pcall")] =
            toks[i..(i + 6).min(toks.len())]
        {
            let ends = match toks.get(i + 6) {
                None | Some(Tok::Punct(b";")) => true,
                Some(Tok::Name(n)) => *n != b"or" && *n != b"and",
                _ => false,
            };
            if ends {
                aliases.push(name);
                // The alias's name and the `redis` it names.
                declared.extend([i + 1, i + 3]);
            }
        }
    }
    let is_field = |i: usize| {
        matches!(
            i.checked_sub(1).map(|p| toks[p]),
            Some(Tok::Punct(b".") | Tok::Punct(b":"))
        )
    };
    // A call at `toks[at]` (its `(`): a plain literal that is not
    // keyspace-wide, then `,` or `)`.
    let named_call = |at: usize| {
        matches!(
            (toks.get(at), toks.get(at + 1), toks.get(at + 2)),
            (
                Some(Tok::Punct(b"(")),
                Some(Tok::Str { text, plain: true }),
                Some(Tok::Punct(b",") | Tok::Punct(b")")),
            ) if !is_keyspace(text)
        )
    };
    for (i, t) in toks.iter().enumerate() {
        let Tok::Name(name) = *t else { continue };
        if ESCAPES.iter().any(|e| name == e.as_bytes()) {
            return false;
        }
        // A field of that name of another table (`t.redis`, `t:rcall`):
        // that table could hold the global or an alias only if it
        // escaped, which the rules here see at their own use.
        if is_field(i) || declared.contains(&i) {
            continue;
        }
        if aliases.contains(&name) {
            if !named_call(i + 1) {
                return false;
            }
            continue;
        }
        if name != b"redis" {
            continue;
        }
        let field = match (toks.get(i + 1), toks.get(i + 2)) {
            (Some(Tok::Punct(b".")), Some(Tok::Name(f))) => *f,
            _ => return false,
        };
        if (field == b"call" || field == b"pcall") && !named_call(i + 3) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::only_named_calls as proven;

    #[test]
    fn literal_names_of_other_commands_are_proven() {
        assert!(proven(b"return redis.call('get', KEYS[1])"));
        assert!(proven(
            b"redis.call(\"SET\", KEYS[1], ARGV[1]) return redis.pcall('hscan', KEYS[2], 0)"
        ));
        assert!(proven(b"redis.setresp(3) return redis.sha1hex('x')"));
        assert!(proven(b"-- redis.call(ARGV[1])\nreturn redis.call('ping')"));
        assert!(proven(b"--[==[ redis.call(x) ]==] return 1"));
        assert!(proven(
            b"local s = [[redis.call(x)]] return redis.call('echo', s)"
        ));
        assert!(proven(b"return {1, 2.5e-3, 0x1F, t.redis, 'keys' .. 'x'}"));
        assert!(proven(
            b"redis.register_function('f', function(keys, args) \
              return redis.call('incr', keys[1]) end)"
        ));
        assert!(proven(b"return 1"));
        assert!(proven(
            b"local rcall = redis.call\nlocal n = rcall('llen', KEYS[1]) \
              return rcall(\"get\", KEYS[2])"
        ));
    }

    #[test]
    fn keyspace_names_and_names_built_at_run_time_are_not() {
        for code in [
            "return redis.call('KEYS', '*')",
            "return redis.pcall(\"dbsize\")",
            "return redis.call(ARGV[1], '*')",
            "return redis.call(string.upper('k'..'eys'), '*')",
            "local c = 'keys' return redis.call(c, '*')",
            "return redis.call('ke' .. 'ys', '*')",
            "return redis.call('k\\101ys', '*')",
            "return redis.call([[keys]], '*')",
            "return redis.call 'dbsize'",
            "local r = redis return r.call('keys', '*')",
            "local c = redis.call return c('keys', '*')",
            "return pcall(redis.call, 'keys', '*')",
            "return redis['call']('keys', '*')",
            "return _G.redis.call(ARGV[1])",
            "return getfenv(1).redis.call(ARGV[1])",
            "return loadstring('return 1')()",
            "return rawget(x, 'y')",
            "return 'unterminated",
            "--[[ unterminated",
            "local rcall = redis.call return rcall(ARGV[1])",
            "local rcall = redis.call return rcall('scan', 0)",
            "local rcall = redis.call or x return rcall('get', 'k')",
            "local rcall = redis.call local f = rcall return f('keys', '*')",
        ] {
            assert!(!proven(code.as_bytes()), "{code}");
        }
    }
}
