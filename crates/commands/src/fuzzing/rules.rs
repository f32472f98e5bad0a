//! The `acl_rules` and `config_text` targets: the two rule languages an
//! operator (or a client with ACL SETUSER / CONFIG SET) feeds the server.
//!
//! `acl_rules`: the input, cut into words (spaces and line ends separate
//! them, except inside a `( ... )` selector), is given to
//! `ACL SETUSER fz <words>`. Properties:
//! * no panic, and an error is an `-ERR` line that leaves every user as it
//!   was (ACL SETUSER is all or nothing, as Redis 7's);
//! * an accepted user's ACL LIST line, given to a new user, gives that user
//!   the same line (what ACL LIST / ACL SAVE write, ACL LOAD reads back);
//! * ACL GETUSER and ACL DRYRUN of a read and a write answer (no panic).
//!
//! `config_text`: the input as a configuration file. Properties:
//! * no panic; an error names its line;
//! * an accepted file, rewritten whole (`config::rewrite`, every directive)
//!   and parsed again, gives the same CONFIG GET of every directive (what
//!   CONFIG REWRITE writes, the next start reads the same).

use crate::testutil::TestServer;

/// At most this many words, each at most this long, reach ACL SETUSER.
const MAX_WORDS: usize = 24;
const MAX_WORD: usize = 96;

/// Words separated by spaces or line ends; a `(` starts a selector that
/// runs to its `)` (spaces included), as ACL LIST prints selectors.
pub fn words(b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut depth = 0usize;
    for &c in b {
        let sep = matches!(c, b' ' | b'\n' | b'\r' | b'\t' | 0);
        if sep && depth == 0 {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c == b'(' && cur.is_empty() {
            depth = 1;
        } else if c == b')' && depth > 0 {
            depth = 0;
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The ACL LIST line of `user`, without `user <name> `.
fn list_line(t: &mut TestServer, user: &[u8]) -> Option<Vec<u8>> {
    let r = t.raw(&[b"ACL", b"LIST"]);
    let mut prefix = b"user ".to_vec();
    prefix.extend_from_slice(user);
    prefix.push(b' ');
    // Bulk strings of a RESP2 array: `$n\r\n<line>\r\n`.
    let mut rest = &r[..];
    while let Some(p) = rest.iter().position(|&c| c == b'$') {
        rest = &rest[p + 1..];
        let nl = rest.iter().position(|&c| c == b'\n')?;
        let n: usize = std::str::from_utf8(&rest[..nl - 1]).ok()?.parse().ok()?;
        let line = &rest[nl + 1..nl + 1 + n];
        if let Some(tail) = line.strip_prefix(&prefix[..]) {
            return Some(tail.to_vec());
        }
        rest = &rest[nl + 1 + n..];
    }
    None
}

/// True if ACL SETUSER accepted the rules.
pub fn acl_rules(data: &[u8]) -> bool {
    let args: Vec<Vec<u8>> = words(data)
        .into_iter()
        .take(MAX_WORDS)
        .map(|mut w| {
            w.truncate(MAX_WORD);
            w
        })
        .collect();
    let mut t = TestServer::new(1);
    let before = t.raw(&[b"ACL", b"LIST"]);
    let mut argv: Vec<&[u8]> = vec![b"ACL", b"SETUSER", b"fz"];
    argv.extend(args.iter().map(|w| w.as_slice()));
    let r = t.raw(&argv);
    if r != b"+OK\r\n" {
        assert!(
            r.starts_with(b"-ERR "),
            "ACL SETUSER replied {:?}",
            String::from_utf8_lossy(&r)
        );
        assert_eq!(
            t.raw(&[b"ACL", b"LIST"]),
            before,
            "a refused ACL SETUSER changed the users"
        );
        return false;
    }
    t.raw(&[b"ACL", b"GETUSER", b"fz"]);
    t.raw(&[b"ACL", b"DRYRUN", b"fz", b"GET", b"k"]);
    t.raw(&[b"ACL", b"DRYRUN", b"fz", b"SET", b"k", b"v"]);
    t.raw(&[b"ACL", b"DRYRUN", b"fz", b"PUBLISH", b"ch", b"m"]);
    let line = list_line(&mut t, b"fz").expect("the user is listed");
    // A parenthesis inside a pattern makes ACL LIST's line ambiguous, in
    // Redis too (ACL LOAD merges a selector's words up to the first one
    // that ends with `)`): no round trip to check.
    let inner_paren = |w: &Vec<u8>| {
        let inner = if w.first() == Some(&b'(') && w.last() == Some(&b')') && w.len() >= 2 {
            &w[1..w.len() - 1]
        } else {
            &w[..]
        };
        inner.iter().any(|&c| c == b'(' || c == b')')
    };
    if args.iter().any(inner_paren) {
        return true;
    }
    let again = words(&line);
    // A new user (not `reset`, which adds `sanitize-payload`).
    let mut argv: Vec<&[u8]> = vec![b"ACL", b"SETUSER", b"fz2"];
    argv.extend(again.iter().map(|w| w.as_slice()));
    let r = t.raw(&argv);
    assert_eq!(
        r,
        b"+OK\r\n",
        "ACL LIST's line {:?} is refused: {:?}",
        String::from_utf8_lossy(&line),
        String::from_utf8_lossy(&r)
    );
    let line2 = list_line(&mut t, b"fz2").expect("the copy is listed");
    assert_eq!(
        String::from_utf8_lossy(&line2),
        String::from_utf8_lossy(&line),
        "ACL LIST's line read back differs"
    );
    true
}

/// True if the configuration text parsed.
pub fn config_text(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let mut cfg = config::Config::default();
    if let Err(e) = config::parse_config_text(&text, &mut cfg) {
        assert!(!e.reason().is_empty(), "an error without a reason");
        return false;
    }
    // Redis's quirk, kept for CONFIG GET's sake: a save point's change
    // count is stored as a C int, so `save 1 4294967295` reads back as
    // `1 -1`, which no file accepts (Redis's own rewrite has the same
    // dead end).
    if cfg.save.iter().any(|w| w.starts_with('-')) {
        return true;
    }
    let rewritten = config::rewrite::rewrite_text(b"", &cfg, &[], true);
    let mut back = config::Config::default();
    let rtext = String::from_utf8_lossy(&rewritten);
    if let Err(e) = config::parse_config_text(&rtext, &mut back) {
        panic!("the rewritten file does not parse: {e}\n{rtext}");
    }
    let all: &[&[u8]] = &[b"*"];
    let a = config::config_get(&cfg, all);
    let b = config::config_get(&back, all);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            (x.0.as_str(), String::from_utf8_lossy(&x.1)),
            (y.0.as_str(), String::from_utf8_lossy(&y.1)),
            "CONFIG REWRITE then a start does not give the same value\n{rtext}"
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_selectors_whole() {
        let w = words(b"on >p  (~x* +get) ~k*\n+@all");
        let w: Vec<String> = w
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        assert_eq!(w, ["on", ">p", "(~x* +get)", "~k*", "+@all"]);
    }

    #[test]
    fn an_acl_user_and_a_config_file() {
        assert!(acl_rules(
            b"on >secret ~app:* &news +@read -keys (~w* +set)"
        ));
        assert!(!acl_rules(b"on +nosuchcommand"));
        assert!(config_text(
            b"port 7000\nsave 60 1 10 5\nmaxmemory 1gb\nbind 127.0.0.1 ::1\n"
        ));
        assert!(!config_text(b"hz banana\n"));
    }
}
