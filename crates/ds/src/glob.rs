//! Glob-style pattern matching with Redis's exact semantics.
//!
//! Owns: [`glob_match`], the matcher behind `KEYS`, `SCAN … MATCH`,
//! `PSUBSCRIBE`, ACL key patterns and `CONFIG GET`. It reproduces Redis 7's
//! `stringmatchlen()` (`src/util.c`) rule for rule, quirks included, because
//! clients observe every difference as a different reply:
//!
//! * `*` matches any run of bytes, `?` any single byte; consecutive `*`
//!   collapse into one.
//! * `[...]` matches one byte from a set; `[^...]` negates it; `a-z` is an
//!   inclusive range and a reversed range `z-a` means the same range; `\x`
//!   inside brackets is the literal `x` (compared case-sensitively even when
//!   `nocase` is set, as in Redis).
//! * With `nocase`, a range's bounds are swapped *before* being lowercased, as
//!   in Redis, so `[Z-a]` matches nothing case-insensitively.
//! * `\x` outside brackets is the literal `x`; a trailing `\` is a literal
//!   backslash.
//! * An unterminated `[` takes the rest of the pattern as its set (so `[abc`
//!   matches one of `a`, `b`, `c`; `[^` matches any one byte; a lone `[`
//!   matches nothing).
//! * The empty string matches only the empty pattern: `*` does not match
//!   `""`. Redis hides this by special-casing the pattern `*` in its callers
//!   (`KEYS`, `SCAN`); callers here must do the same if they need it.
//!
//! Invariants / limits: the matcher never reads outside its inputs (where the
//! C code reads the NUL terminator we read a virtual 0 byte); its recursion
//! depth is bounded by [`MAX_NESTING`] (Redis's protection against stack
//! exhaustion: deeper patterns simply do not match); and Redis's
//! `skipLongerMatches` rule keeps the running time polynomial: once the tail
//! after a `*` failed to match at every position of the remaining string, no
//! earlier `*` can make it match by consuming more, so the whole search stops
//! (without it, `a*a*a*…b` against a long run of `a` is exponential).
//!
//! One deliberate divergence: range bounds are compared as unsigned bytes.
//! Redis compares C `char`s, whose signedness depends on the platform (signed
//! on x86-64, unsigned on aarch64), so ranges involving bytes >= 0x80 differ
//! between Redis builds; we follow the unsigned (aarch64) behaviour.
//!
//! Why recursion and not an NFA/DP: the exact quirks above are defined by the
//! reference algorithm's control flow; a DP would need to re-derive each of
//! them, and with the skip rule the recursive algorithm is already
//! polynomial and allocation-free.

/// Recursion limit, as in Redis: a pattern needing deeper `*` nesting than
/// this does not match.
pub const MAX_NESTING: u32 = 1000;

/// Does `string` match the glob `pattern`? See the module docs for the exact
/// rules. Never panics, never allocates; worst case polynomial in the input
/// lengths.
pub fn glob_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer_matches = false;
    match_impl(pattern, string, nocase, &mut skip_longer_matches, 0)
}

/// The byte at `i`, or 0 past the end: the C code reads the NUL terminator
/// there, and every check that does so only compares against non-zero
/// bytes.
#[inline]
fn at(bytes: &[u8], i: usize) -> u8 {
    bytes.get(i).copied().unwrap_or(0)
}

#[inline]
fn fold(byte: u8, nocase: bool) -> u8 {
    if nocase {
        byte.to_ascii_lowercase()
    } else {
        byte
    }
}

fn match_impl(p: &[u8], s: &[u8], nocase: bool, skip_longer: &mut bool, nesting: u32) -> bool {
    if nesting > MAX_NESTING {
        return false;
    }
    let mut pi = 0;
    let mut si = 0;
    while pi < p.len() && si < s.len() {
        match p[pi] {
            b'*' => {
                while pi + 1 < p.len() && p[pi + 1] == b'*' {
                    pi += 1;
                }
                if pi + 1 == p.len() {
                    return true;
                }
                // Like Redis, only non-empty suffixes are tried: the tail
                // starts with a non-`*` byte, which cannot match "".
                while si < s.len() {
                    if match_impl(&p[pi + 1..], &s[si..], nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    si += 1;
                }
                // The tail matched nowhere in what is left of the string, so
                // no earlier `*` can help by consuming more (Redis's
                // skipLongerMatches).
                *skip_longer = true;
                return false;
            }
            b'?' => si += 1,
            b'[' => {
                pi += 1;
                let negate = at(p, pi) == b'^';
                if negate {
                    pi += 1;
                }
                let c = s[si];
                let mut matched = false;
                loop {
                    let remaining = p.len() - pi;
                    let pc = at(p, pi);
                    if pc == b'\\' && remaining >= 2 {
                        pi += 1;
                        // Redis quirk: escaped bytes ignore `nocase`.
                        if p[pi] == c {
                            matched = true;
                        }
                    } else if pc == b']' {
                        break;
                    } else if remaining == 0 {
                        // Unterminated `[`: step back onto the last byte so
                        // the shared `pi += 1` below ends the pattern.
                        pi -= 1;
                        break;
                    } else if remaining >= 3 && p[pi + 1] == b'-' {
                        let (mut start, mut end) = (p[pi], p[pi + 2]);
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        // Redis quirk: swap first, lowercase second.
                        let (start, end) = (fold(start, nocase), fold(end, nocase));
                        let c = fold(c, nocase);
                        pi += 2;
                        if start <= c && c <= end {
                            matched = true;
                        }
                    } else if fold(pc, nocase) == fold(c, nocase) {
                        matched = true;
                    }
                    pi += 1;
                }
                if matched == negate {
                    return false;
                }
                si += 1;
            }
            b'\\' => {
                if p.len() - pi >= 2 {
                    pi += 1;
                }
                if fold(p[pi], nocase) != fold(s[si], nocase) {
                    return false;
                }
                si += 1;
            }
            pc => {
                if fold(pc, nocase) != fold(s[si], nocase) {
                    return false;
                }
                si += 1;
            }
        }
        pi += 1;
        if si == s.len() {
            while at(p, pi) == b'*' {
                pi += 1;
            }
            break;
        }
    }
    pi == p.len() && si == s.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes(), false)
    }

    fn mi(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes(), true)
    }

    #[test]
    fn literals_and_empty() {
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(!m("a", ""));
        assert!(m("hello", "hello"));
        assert!(!m("hello", "hell"));
        assert!(!m("hell", "hello"));
        assert!(!m("Hello", "hello"));
        assert!(mi("HeLLo", "hello"));
        // Redis quirk: `*` does not match the empty string by itself.
        assert!(!m("*", ""));
        assert!(!m("**", ""));
        assert!(m("a*", "a"));
        assert!(m("a**", "a"));
    }

    #[test]
    fn redis_keyspace_patterns() {
        // From Redis's tests/unit/keyspace.tcl (KEYS with patterns).
        assert!(m("h?llo", "hello"));
        assert!(m("h?llo", "hallo"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(!m("h*llo", "heeeell"));
        assert!(m("h[ae]llo", "hello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(m("h[^e]llo", "hbllo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hallo"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(!m("h[a-b]llo", "hcllo"));
        assert!(m("foo*", "foo_a"));
        assert!(!m("foo*", "key_x"));
        assert!(m("*", "anything"));
    }

    #[test]
    fn stars() {
        assert!(m("*", "x"));
        assert!(m("***", "xyz"));
        assert!(m("a*b*c", "abc"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("*c", "abc"));
        assert!(!m("*c", "abd"));
        assert!(m("*a*", "bab"));
        assert!(m("?*", "a"));
        assert!(!m("?*?", "a"));
    }

    #[test]
    fn brackets() {
        assert!(m("h[b-a]llo", "hallo"), "reversed range");
        assert!(m("h[b-a]llo", "hbllo"));
        assert!(m("[a-cx]", "x"));
        assert!(!m("[a-cx]", "d"));
        assert!(m("[^a-c]", "d"));
        assert!(!m("[^a-c]", "b"));
        assert!(m("[\\]]", "]"), "escaped ] inside brackets");
        assert!(m("[a\\-z]", "-"));
        assert!(!m("[a\\-z]", "b"));
        assert!(!m("[]", "x"), "empty set matches nothing");
        assert!(m("[^]", "x"), "negated empty set matches anything");
        // `a-]` is a range up to `]` that swallows the closing bracket.
        assert!(m("[a-]", "]"));
        assert!(m("[a-]", "`"));
        assert!(!m("[a-]", "-"));
        assert!(mi("[A-C]", "b"));
        assert!(mi("[a-c]", "B"));
        // Redis quirk: bounds swapped before lowercasing.
        assert!(!mi("[Z-a]", "z"));
        assert!(m("[Z-a]", "_"));
        // Redis quirk: escaped bytes in a set are case-sensitive.
        assert!(!mi("[\\A]", "a"));
        assert!(mi("[A]", "a"));
    }

    #[test]
    fn unterminated_bracket() {
        assert!(m("[abc", "a"));
        assert!(m("[abc", "c"));
        assert!(!m("[abc", "d"));
        assert!(!m("[abc", "ab"));
        assert!(!m("[", "a"));
        assert!(!m("[", ""));
        assert!(m("[^", "a"));
        assert!(!m("a[", "a"));
        assert!(m("x[\\", "x\\"));
    }

    #[test]
    fn escapes() {
        assert!(m("h\\*llo", "h*llo"));
        assert!(!m("h\\*llo", "hello"));
        assert!(m("\\?", "?"));
        assert!(!m("\\?", "x"));
        assert!(m("\\[a]", "[a]"));
        assert!(m("a\\", "a\\"), "trailing backslash is literal");
        assert!(mi("\\A", "a"), "escape outside brackets honours nocase");
        assert!(m("*\\*", "abc*"));
    }

    #[test]
    fn no_exponential_blowup() {
        // Redis's "Regression for pattern matching long nested loops".
        let pattern = "a*".repeat(35) + "b";
        let string = "a".repeat(85);
        assert!(!m(&pattern, &string));
        let pattern = "*a".repeat(40) + "*b";
        assert!(!m(&pattern, &"a".repeat(200)));
        assert!(m(&pattern, &("a".repeat(200) + "b")));
    }

    #[test]
    fn nesting_limit() {
        let within = "*a".repeat(500);
        assert!(m(&within, &"a".repeat(500)));
        let beyond = "*a".repeat(1100);
        assert!(!m(&beyond, &"a".repeat(1100)), "deeper than Redis allows");
    }

    #[test]
    fn binary_safe() {
        assert!(glob_match(b"\x00*\xff", b"\x00abc\xff", false));
        assert!(glob_match(b"[\x80-\xff]", b"\x90", false));
        assert!(!glob_match(b"[\x80-\xff]", b"\x10", false));
    }

    /// Textbook glob over `*`, `?` and literals, by dynamic programming.
    fn reference(p: &[u8], s: &[u8]) -> bool {
        if s.is_empty() {
            // The Redis quirk: only the empty pattern matches "".
            return p.is_empty();
        }
        let mut dp = vec![vec![false; s.len() + 1]; p.len() + 1];
        dp[0][0] = true;
        for i in 1..=p.len() {
            for j in 0..=s.len() {
                dp[i][j] = match p[i - 1] {
                    b'*' => dp[i - 1][j] || (j > 0 && dp[i][j - 1]),
                    b'?' => j > 0 && dp[i - 1][j - 1],
                    c => j > 0 && s[j - 1] == c && dp[i - 1][j - 1],
                };
            }
        }
        dp[p.len()][s.len()]
    }

    proptest! {
        #[test]
        fn agrees_with_reference(p in "[ab*?]{0,10}", s in "[ab]{0,12}") {
            prop_assert_eq!(m(&p, &s), reference(p.as_bytes(), s.as_bytes()));
        }

        #[test]
        fn never_panics(p in proptest::collection::vec(any::<u8>(), 0..24),
                        s in proptest::collection::vec(any::<u8>(), 0..24),
                        nocase: bool) {
            let _ = glob_match(&p, &s, nocase);
        }

        #[test]
        fn never_panics_on_metacharacters(p in r"[ab\[\]^\-*?\\]{0,16}",
                                          s in r"[ab\[\]^\-*?\\]{0,16}",
                                          nocase: bool) {
            let _ = glob_match(p.as_bytes(), s.as_bytes(), nocase);
        }
    }
}
