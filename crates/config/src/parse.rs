//! Config text in redis.conf syntax, and the value parsers Redis uses on it.
//!
//! # What this module owns
//!
//! [`ConfigError`] (the exact fatal text `redis-server` prints), [`parse_config_text`] (Redis's
//! `loadServerConfigFromString`: comments, quoting, `user` and `rename-command` lines, `save`
//! lines that add up), and the ports of Redis's own parsing helpers: [`split_args`]
//! (`sdssplitargs`), `cat_repr` (`sdscatrepr`), `memtoull`, C `strtoll` in base 10 and 8.
//!
//! # Why it is a module of its own
//!
//! "Accepts the same input" is the contract: the same file must load in both servers with the
//! same result. These ports are Redis's grammar, independent of which directives exist (that is
//! [`crate::directives`]) and of where the text came from (that is [`crate::cli`]).

use std::fmt;

use crate::directives::{lookup, DIRECTIVES};
use crate::{Config, RenameCommand, VERSION};

/// A fatal configuration error. `Display` is the exact text `redis-server` prints to stderr
/// (without the final newline: print it with `eprintln!`), then the server exits with status 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line of the combined config text (file, stdin, then command line), if any.
    line_no: Option<usize>,
    /// The offending line, trimmed as Redis shows it.
    line: String,
    reason: String,
}

impl ConfigError {
    pub(crate) fn at_line(line_no: usize, line: &[u8], reason: impl Into<String>) -> ConfigError {
        ConfigError {
            line_no: Some(line_no),
            line: String::from_utf8_lossy(line).into_owned(),
            reason: reason.into(),
        }
    }

    pub(crate) fn fatal(reason: String) -> ConfigError {
        ConfigError {
            line_no: None,
            line: String::new(),
            reason,
        }
    }

    /// The 1-based line number for errors in the config text; `None` for I/O errors.
    pub fn line_no(&self) -> Option<usize> {
        self.line_no
    }

    /// Redis's reason text, e.g. `argument couldn't be parsed into an integer`.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line_no {
            Some(n) => write!(
                f,
                "\n*** FATAL CONFIG FILE ERROR (Tessera {VERSION}) ***\n\
                 Reading the configuration file, at line {n}\n>>> '{}'\n{}",
                self.line, self.reason
            ),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Applies redis.conf-syntax `text` on top of `cfg`, line by line; later lines override
/// earlier ones. Comments (`#`), blank lines, `"..."` (with `\n`, `\xHH`, … escapes) and
/// `'...'` quoting are Redis's. `include` is rejected.
///
/// Errors: the first bad line, as [`ConfigError`] with Redis's reason. On error `cfg` keeps the
/// lines applied before it (the server exits anyway). Complexity: O(text length × table size).
pub fn parse_config_text(text: &str, cfg: &mut Config) -> Result<(), ConfigError> {
    parse_config_bytes(text.as_bytes(), cfg)
}

/// Redis's `loadServerConfigFromString`, on bytes: values such as `requirepass` may be binary.
pub(crate) fn parse_config_bytes(text: &[u8], cfg: &mut Config) -> Result<(), ConfigError> {
    // Redis's setConfigSaveOption while reading a file: the first `save`
    // line replaces the defaults, later ones add their points (`save ""`
    // clears what came before it).
    let mut save_loaded = false;
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let line_no = i + 1;
        let line = trim(raw, b" \t\r\n");
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let Some(argv) = split_args(line) else {
            return Err(ConfigError::at_line(
                line_no,
                line,
                "Unbalanced quotes in configuration line",
            ));
        };
        let Some((name, args)) = argv.split_first() else {
            continue;
        };
        // Redis's `user` lines: kept for the ACL layer, which checks them at
        // start (and exits on a bad one, as Redis does). A user defined twice
        // (in the file, on the command line, or across both) is refused here,
        // with Redis's text (`ACLAppendUserForLoading`: names compared as
        // written).
        if name.eq_ignore_ascii_case(b"user") && !args.is_empty() {
            if cfg.users.iter().any(|u| u.first() == args.first()) {
                return Err(ConfigError::at_line(
                    line_no,
                    line,
                    format!(
                        "Error in user declaration '{}': Duplicate user found. A user can only be defined once in config files",
                        String::from_utf8_lossy(&args[0])
                    ),
                ));
            }
            cfg.users.push(args.to_vec());
            continue;
        }
        if name.eq_ignore_ascii_case(b"rename-command") && args.len() == 2 {
            cfg.rename_commands.push(RenameCommand {
                from: args[0].clone(),
                to: args[1].clone(),
                line_no,
                line: String::from_utf8_lossy(line).into_owned(),
            });
            continue;
        }
        let Some(idx) = lookup(name) else {
            let reason = if name.eq_ignore_ascii_case(b"include") && args.len() == 1 {
                "include is not supported by Tessera: put every directive in one file"
            } else {
                "Bad directive or wrong number of arguments"
            };
            return Err(ConfigError::at_line(line_no, line, reason));
        };
        let kind = &DIRECTIVES[idx].kind;
        let kept_save = (DIRECTIVES[idx].name == "save" && save_loaded).then(|| cfg.save.clone());
        let result = if !kind.is_multi_arg() {
            if args.len() != 1 {
                return Err(ConfigError::at_line(
                    line_no,
                    line,
                    "wrong number of arguments",
                ));
            }
            kind.set(cfg, args)
        } else if args.len() == 1 && !args[0].is_empty() {
            // Redis splits a lone multi-arg value again, so `--bind "a b"` means `bind a b`.
            match split_args(&args[0]) {
                Some(words) => kind.set(cfg, &words),
                None => Err("Unbalanced quotes in configuration line".into()),
            }
        } else {
            kind.set(cfg, args)
        };
        result.map_err(|reason| ConfigError::at_line(line_no, line, reason))?;
        if DIRECTIVES[idx].name == "save" {
            save_loaded = true;
            let reset = args.len() == 1 && args[0].is_empty();
            if let (Some(mut kept), false) = (kept_save, reset) {
                kept.append(&mut cfg.save);
                cfg.save = kept;
            }
        }
    }
    Ok(())
}

fn trim<'a>(s: &'a [u8], set: &[u8]) -> &'a [u8] {
    let start = s.iter().position(|b| !set.contains(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !set.contains(b))
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Redis's `sdssplitargs`: words separated by blanks, `"..."` with escapes, `'...'` with `\'`.
/// `None` for unbalanced quotes or a closing quote not followed by a blank.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // sdssplitargs works on C strings: a NUL ends the line.
    let line = line.split(|&b| b == 0).next().unwrap_or_default();
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut words = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_c_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(words);
        }
        let (mut in_dq, mut in_sq) = (false, false);
        let mut cur = Vec::new();
        loop {
            let c = at(p);
            if in_dq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && at(p + 2).is_ascii_hexdigit()
                    && at(p + 3).is_ascii_hexdigit()
                {
                    cur.push(hex_val(at(p + 2)) * 16 + hex_val(at(p + 3)));
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    cur.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else if in_sq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        p += 1;
                        break;
                    }
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    _ => cur.push(c),
                }
            }
            p += 1;
        }
        words.push(cur);
    }
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// Redis's `sdscatrepr`: the quoted form `redis-server` gives command-line values.
pub(crate) fn cat_repr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', c]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// C `strtoll(s, &end, 8)` accepted only if `*end == '\0'` and there was no overflow, as
/// Redis's `OCTAL_CONFIG` parser does. Quirk kept: `""` parses as 0 (no digits, end == s).
pub(crate) fn strtoll_octal(s: &[u8]) -> Option<i64> {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let start = i;
    let mut mag: Option<u64> = Some(0);
    while i < s.len() && (b'0'..=b'7').contains(&s[i]) {
        mag = mag.and_then(|m| m.checked_mul(8)?.checked_add(u64::from(s[i] - b'0')));
        i += 1;
    }
    if i == start {
        return s.is_empty().then_some(0);
    }
    if i != s.len() {
        return None;
    }
    let mag = mag?;
    if negative {
        0i64.checked_sub_unsigned(mag)
    } else {
        i64::try_from(mag).ok()
    }
}

/// Redis's `memtoull`: digits then an optional unit, case-insensitive: `b`, `k` (1000),
/// `kb` (1024), `m`, `mb`, `g`, `gb`. Quirks kept: `""` and a bare unit are 0; digits that
/// overflow saturate (C `strtoull`). Difference: an overflowing multiplication is rejected.
pub(crate) fn memtoull(s: &[u8]) -> Option<u64> {
    if s.first() == Some(&b'-') {
        return None;
    }
    let split = s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let mul: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    // Redis copies the digits into a 128-byte buffer first.
    if digits.len() >= 128 {
        return None;
    }
    let val = digits.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    val.checked_mul(mul)
}

/// C's `strtoll(s, &end, 10)` then the cast to `int` Redis makes (see [`strtoll`]),
/// truncated to 32 bits.
pub(crate) fn strtoll_int(s: &[u8]) -> Option<i32> {
    // The implementation-defined narrowing of a C cast: keep the low 32 bits.
    strtoll(s).map(|v| v as i32)
}

/// C's `strtoll(s, &end, 10)`: leading C spaces and a sign, saturating at the `long long`
/// bounds. `None` when `end` is not the end of `s` (no digits at all, unless `s` is empty or
/// blank, is such a case).
pub(crate) fn strtoll(s: &[u8]) -> Option<i64> {
    let mut i = s.iter().take_while(|&&b| is_c_space(b)).count();
    if i == s.len() {
        // No digits: strtoll leaves `end` at the start, which is the end only for "".
        return s.is_empty().then_some(0);
    }
    let neg = match s[i] {
        b'-' => {
            i += 1;
            true
        }
        b'+' => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mag = digits.iter().fold(0u128, |acc, d| {
        (acc * 10 + u128::from(d - b'0')).min(1 << 64)
    });
    Some(if neg {
        (-(mag as i128)).max(i128::from(i64::MIN)) as i64
    } else {
        mag.min(i64::MAX as u128) as i64
    })
}

#[cfg(test)]
mod tests;
