//! The AOF manifest (Redis 7's `<appendfilename>.manifest`): its lines
//! read as Redis's `aofLoadManifestFromFile` reads them (with its reasons
//! for refusing a file), and written atomically as `aofInfoFormat` writes
//! them. The file set it names is `aof_files`.

use std::fs::File;
use std::io::Write;

use super::aof_files::{strerror, Paths};
use crate::log;

/// One manifest line.
#[derive(Clone, Debug, PartialEq)]
pub struct ManifestFile {
    pub name: String,
    pub seq: u64,
    /// `b` base, `h` history, `i` incr.
    pub kind: char,
}

/// The sequence number the next file of `kind` takes: one past the
/// highest of that kind (1 with none).
pub fn next_seq(files: &[ManifestFile], kind: char) -> u64 {
    files
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| f.seq)
        .max()
        .unwrap_or(0)
        + 1
}

/// Why a manifest cannot be used: Redis's `aofLoadManifestFromFile`
/// messages, and the line (number, trimmed text) where it stopped.
#[derive(Debug)]
pub struct ManifestError {
    pub at: Option<(usize, String)>,
    pub why: &'static str,
}

impl ManifestError {
    /// Logs Redis's lines before the reason and returns the reason (the
    /// caller exits with it as the last line).
    pub fn fatal(self) -> String {
        log::warning(format_args!("\n*** FATAL AOF MANIFEST FILE ERROR ***\n"));
        if let Some((n, line)) = &self.at {
            log::warning(format_args!("Reading the manifest file, at line {n}\n"));
            log::warning(format_args!(">>> '{line}'\n"));
        }
        self.why.to_string()
    }
}

/// The longest manifest line Redis reads (`MANIFEST_MAX_LINE`).
const MANIFEST_MAX_LINE: usize = 1024;

/// Parses a manifest as Redis's `aofLoadManifestFromFile`: lines of
/// `key value` pairs (`file`, `seq`, `type`; others ignored), `#` comments;
/// an empty file, a blank or too long line (or a last one without its
/// newline), an odd or short line, a missing key, a path for a name, a
/// second base, incr sequences not increasing or an unknown type refuse
/// the whole file.
pub fn parse_manifest(text: impl AsRef<[u8]>) -> Result<Vec<ManifestFile>, ManifestError> {
    let mut rest = text.as_ref();
    if rest.is_empty() {
        return Err(ManifestError {
            at: None,
            why: "Found an empty AOF manifest",
        });
    }
    let mut out = Vec::new();
    let (mut linenum, mut max_incr, mut has_base) = (0usize, 0i64, false);
    while !rest.is_empty() {
        // As `fgets` into a buffer of MANIFEST_MAX_LINE + 1.
        let take = match rest
            .iter()
            .take(MANIFEST_MAX_LINE)
            .position(|&c| c == b'\n')
        {
            Some(i) => i + 1,
            None => rest.len().min(MANIFEST_MAX_LINE),
        };
        let (buf, tail) = rest.split_at(take);
        rest = tail;
        linenum += 1;
        if buf[0] == b'#' {
            continue;
        }
        let line = String::from_utf8_lossy(trim(buf)).into_owned();
        let err = |why| {
            Err(ManifestError {
                at: Some((linenum, line.clone())),
                why,
            })
        };
        if !buf.contains(&b'\n') {
            return Err(ManifestError {
                at: None,
                why: "The AOF manifest file contains too long line",
            });
        }
        if line.is_empty() {
            return err("Invalid AOF manifest file format");
        }
        let argv = match split_args(trim(buf)) {
            Some(a) if a.len() >= 6 && a.len() % 2 == 0 => a,
            _ => return err("Invalid AOF manifest file format"),
        };
        let (mut name, mut seq, mut kind) = (None, 0i64, None);
        for kv in argv.chunks(2) {
            let (k, v) = (&kv[0], &kv[1]);
            if k.eq_ignore_ascii_case(b"file") {
                if v.contains(&b'/') || v.contains(&b'\\') {
                    return err("File can't be a path, just a filename");
                }
                name = Some(String::from_utf8_lossy(v).into_owned());
            } else if k.eq_ignore_ascii_case(b"seq") {
                seq = atoll(v);
            } else if k.eq_ignore_ascii_case(b"type") {
                kind = v.first().copied().filter(|&c| c != 0);
            }
        }
        let (Some(name), Some(kind)) = (name, kind) else {
            return err("Invalid AOF manifest file format");
        };
        if seq == 0 {
            return err("Invalid AOF manifest file format");
        }
        match kind {
            b'b' if has_base => return err("Found duplicate base file information"),
            b'b' => has_base = true,
            b'h' => {}
            b'i' if seq <= max_incr => return err("Found a non-monotonic sequence number"),
            b'i' => max_incr = seq,
            _ => return err("Unknown AOF file type"),
        }
        out.push(ManifestFile {
            name,
            // A negative sequence (Redis takes any `atoll`): as 0 here.
            seq: seq.max(0) as u64,
            kind: kind as char,
        });
    }
    Ok(out)
}

/// Redis's `sdstrim(line, " \t\r\n")`.
fn trim(b: &[u8]) -> &[u8] {
    let is = |c: &u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
    let start = b.iter().position(|c| !is(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !is(c)).map_or(start, |i| i + 1);
    &b[start..end]
}

/// C's `atoll`: optional blanks and sign, then digits; 0 if none.
fn atoll(b: &[u8]) -> i64 {
    let s = std::str::from_utf8(b).unwrap_or("").trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if neg {
        -n
    } else {
        n
    }
}

/// Redis's `sdssplitargs`: words split on blanks, `"..."` with escapes
/// (`\n \r \t \b \a \\ \" \xHH`) and `'...'` (`\'`); `None` for an
/// unbalanced quote or a quote not followed by a blank.
fn split_args(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = b.get(i).copied();
            if inq {
                match c? {
                    b'\\'
                        if b.get(i + 1) == Some(&b'x')
                            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                            && b.get(i + 3).is_some_and(u8::is_ascii_hexdigit) =>
                    {
                        let h = std::str::from_utf8(&b[i + 2..i + 4]).ok()?;
                        cur.push(u8::from_str_radix(h, 16).ok()?);
                        i += 3;
                    }
                    b'\\' if i + 1 < b.len() => {
                        i += 1;
                        cur.push(match b[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            o => o,
                        });
                    }
                    b'"' => {
                        if b.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    o => cur.push(o),
                }
            } else if insq {
                match c? {
                    b'\\' if b.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    b'\'' => {
                        if b.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    o => cur.push(o),
                }
            } else {
                match c {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(o) => cur.push(o),
                }
            }
            i += 1;
        }
        out.push(cur);
    }
}

/// The manifest at `p`, as Redis's `aofLoadManifestFromDisk`: none (an
/// empty list) without the directory or the file; an error (already
/// logged but for its last line) if it cannot be read or parsed.
pub fn read_manifest(p: &Paths) -> Result<Vec<ManifestFile>, String> {
    if !p.dir.is_dir() {
        return Ok(Vec::new());
    }
    match std::fs::read(p.manifest()) {
        Ok(t) => parse_manifest(t).map_err(ManifestError::fatal),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!(
            "Fatal error: can't open the AOF manifest file {} for reading: {}",
            p.manifest().display(),
            strerror(&e)
        )),
    }
}

/// A file name as Redis's `aofInfoFormat` writes it: as is, or quoted
/// and escaped (`sdscatrepr`) if it has blanks, quotes, backslashes or
/// bytes not printable, so that `split_args` reads it back.
fn repr(name: &str) -> String {
    let needs = |c: u8| c == b'\\' || c == b'"' || !c.is_ascii_graphic();
    if !name.bytes().any(needs) {
        return name.to_string();
    }
    let mut out = String::from("\"");
    for c in name.bytes() {
        match c {
            b'\\' | b'"' => {
                out.push('\\');
                out.push(c as char);
            }
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            c if c == b' ' || c.is_ascii_graphic() => out.push(c as char),
            c => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out.push('"');
    out
}

/// Writes the manifest atomically (temporary file, fsync, rename).
pub fn write_manifest(p: &Paths, files: &[ManifestFile]) -> std::io::Result<()> {
    let mut text = String::new();
    for f in files {
        text.push_str(&format!(
            "file {} seq {} type {}\n",
            repr(&f.name),
            f.seq,
            f.kind
        ));
    }
    let tmp = p.dir.join(format!("temp-{}.manifest", p.name));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, p.manifest())?;
    if let Ok(d) = File::open(&p.dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_lines_as_redis_writes_them() {
        let m = "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n";
        let f = parse_manifest(m).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].kind, 'b');
        assert_eq!(f[1].name, "appendonly.aof.1.incr.aof");
        assert!(parse_manifest("file x seq").is_err());
    }

    /// Redis's reasons, and a name with blanks or escapes written quoted
    /// (`sdscatrepr`) and read back (`sdssplitargs`).
    #[test]
    fn manifests_refused_with_redis_reasons_and_quoted_names_round_trip() {
        let why = |m: &str| parse_manifest(m).unwrap_err().why;
        assert_eq!(why(""), "Found an empty AOF manifest");
        assert_eq!(
            why("file a seq 1 type b"),
            "The AOF manifest file contains too long line"
        );
        assert_eq!(
            why("file a seq 1 type b\n\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            why("file a seq 0 type b\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            why("file a seq 1 type\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            why("file \"a seq 1 type b\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            why("file a/b seq 1 type b\n"),
            "File can't be a path, just a filename"
        );
        assert_eq!(why("file a seq 1 type z\n"), "Unknown AOF file type");
        let m = "file a seq 2 type i\nfile b seq 2 type i\n";
        assert_eq!(why(m), "Found a non-monotonic sequence number");
        let e = parse_manifest("# c\nfile a seq 1 type b\nfile b seq 2 type b\n").unwrap_err();
        assert_eq!(e.why, "Found duplicate base file information");
        assert_eq!(e.at, Some((3, "file b seq 2 type b".into())));
        let ok = parse_manifest("# c\nFILE a SEQ 3 TYPE h extra x\n").unwrap();
        assert_eq!((ok[0].name.as_str(), ok[0].seq, ok[0].kind), ("a", 3, 'h'));

        let name = " file seq \n\n.aof \"\u{1}.1.incr.aof";
        let line = format!("file {} seq 1 type i\n", repr(name));
        assert_eq!(
            line,
            "file \" file seq \\n\\n.aof \\\"\\x01.1.incr.aof\" seq 1 type i\n"
        );
        assert_eq!(parse_manifest(&line).unwrap()[0].name, name);
        assert_eq!(
            repr("appendonly.aof.1.base.rdb"),
            "appendonly.aof.1.base.rdb"
        );
    }
}
