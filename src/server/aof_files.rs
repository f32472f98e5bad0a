//! The AOF's file set on disk: where it lives (`dir/appenddirname/`), its
//! manifest (Redis 7's line format, written atomically), opening the incr
//! file for appending, and loading the whole set at start-up by replaying
//! every command through the normal handlers. The writer that appends to
//! it is `aof`; rewrites that change the set are `aof_rewrite`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use commands::persist::LoadedAof;
use config::Config;

use crate::log;

/// Where the AOF files live.
pub struct Paths {
    pub dir: PathBuf,
    pub name: String,
}

impl Paths {
    pub fn of(cfg: &Config) -> Paths {
        let root = cfg.dir.clone().unwrap_or_else(|| PathBuf::from("."));
        Paths {
            dir: root.join(String::from_utf8_lossy(&cfg.appenddirname).into_owned()),
            name: String::from_utf8_lossy(&cfg.appendfilename).into_owned(),
        }
    }
    pub fn manifest(&self) -> PathBuf {
        self.dir.join(format!("{}.manifest", self.name))
    }
}

/// One manifest line.
#[derive(Clone, Debug, PartialEq)]
pub struct ManifestFile {
    pub name: String,
    pub seq: u64,
    /// `b` base, `h` history, `i` incr.
    pub kind: char,
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

/// C's `strerror` text of an I/O error (without Rust's " (os error N)").
fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
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

/// Opens the file set for appending at start-up, as Redis's
/// `aofOpenIfNeededOnServerStart`: creates the directory, a base file if
/// the manifest names no file, an incr file after the last one if it names
/// none, and writes the manifest; returns the incr file to append to.
pub fn open_files(p: &Paths, rdb_base: bool) -> Result<File, String> {
    std::fs::create_dir_all(&p.dir).map_err(|e| {
        format!(
            "Can't open or create append-only dir {}: {}",
            p.dir.display(),
            strerror(&e)
        )
    })?;
    let mut files = read_manifest(p)?;
    let mut changed = false;
    if !files.iter().any(|f| f.kind == 'b' || f.kind == 'i') {
        let seq = files
            .iter()
            .filter(|f| f.kind == 'b')
            .map(|f| f.seq)
            .max()
            .unwrap_or(0)
            + 1;
        // Redis rewrites the empty dataset into it: an empty RDB with
        // `aof-use-rdb-preamble`, else an empty file of commands.
        let base = ManifestFile {
            name: format!(
                "{}.{seq}.base.{}",
                p.name,
                if rdb_base { "rdb" } else { "aof" }
            ),
            seq,
            kind: 'b',
        };
        let body = if rdb_base { empty_rdb() } else { Vec::new() };
        File::create(p.dir.join(&base.name))
            .and_then(|mut f| {
                f.write_all(&body)?;
                f.sync_all()
            })
            .map_err(|e| format!("Can't create the AOF base file: {}", strerror(&e)))?;
        log::notice(format_args!(
            "Creating AOF base file {} on server start",
            base.name
        ));
        files.insert(0, base);
        changed = true;
    }
    let incr = match files.iter().rfind(|f| f.kind == 'i') {
        Some(f) => {
            log::notice(format_args!(
                "Opening AOF incr file {} on server start",
                f.name
            ));
            f.clone()
        }
        None => {
            let seq = files
                .iter()
                .filter(|f| f.kind == 'i')
                .map(|f| f.seq)
                .max()
                .unwrap_or(0)
                + 1;
            let f = ManifestFile {
                name: format!("{}.{seq}.incr.aof", p.name),
                seq,
                kind: 'i',
            };
            log::notice(format_args!(
                "Creating AOF incr file {} on server start",
                f.name
            ));
            files.push(f.clone());
            changed = true;
            f
        }
    };
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(p.dir.join(&incr.name))
        .map_err(|e| {
            format!(
                "Can't open the append-only file {}: {}",
                incr.name,
                strerror(&e)
            )
        })?;
    if changed {
        write_manifest(p, &files)
            .map_err(|e| format!("Can't persist the AOF manifest: {}", strerror(&e)))?;
    }
    Ok(file)
}

/// An RDB of no key, as an AOF base (header, EOF, checksum).
fn empty_rdb() -> Vec<u8> {
    let now_s = engine::now_ms() / 1000;
    let mut out = Vec::new();
    engine::rdb::write_header(&mut out, now_s, 0, true);
    engine::rdb::write_eof(&mut out);
    let crc = engine::rdb::crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

// ------------------------------------------------------------------ loading

/// Loads the AOF file set under `cfg`'s `dir` (start-up) into `nshards`
/// shards; see [`load_from`].
pub fn load(cfg: &Config, nshards: usize) -> Result<Option<LoadedAof>, String> {
    load_from(&Paths::of(cfg), cfg, nshards)
}

/// Redis's `aofUpgradePrepare`, where `loadAppendOnlyFiles` calls it: an
/// AOF of Redis before 7.0 (`appendfilename` in `dir` itself) becomes the
/// base of a new manifest and moves into the AOF directory, when there is
/// no directory, no file in its manifest, or only a base of that name not
/// there yet (an upgrade interrupted before its move).
fn upgrade_old_aof(p: &Paths, files: &mut Vec<ManifestFile>) -> Result<(), String> {
    let root = p
        .dir
        .parent()
        .map_or_else(|| Path::new(".").to_path_buf(), Path::to_path_buf);
    let old = root.join(&p.name);
    if !old.is_file() {
        return Ok(());
    }
    let base = files.iter().find(|f| f.kind == 'b');
    let has_incr = files.iter().any(|f| f.kind == 'i');
    let upgrade = !p.dir.is_dir()
        || (base.is_none() && !has_incr)
        || (base.is_some_and(|b| b.name == p.name) && !has_incr && !p.dir.join(&p.name).exists());
    if !upgrade {
        return Ok(());
    }
    std::fs::create_dir_all(&p.dir).map_err(|e| {
        format!(
            "Can't open or create append-only dir {}: {}",
            p.dir.display(),
            strerror(&e)
        )
    })?;
    files.retain(|f| f.kind != 'b');
    files.insert(
        0,
        ManifestFile {
            name: p.name.clone(),
            seq: 1,
            kind: 'b',
        },
    );
    write_manifest(p, files)
        .map_err(|e| format!("Can't persist the AOF manifest: {}", strerror(&e)))?;
    std::fs::rename(&old, p.dir.join(&p.name)).map_err(|e| {
        format!(
            "Error trying to move the old AOF file {} into dir {}: {}",
            p.name,
            p.dir.display(),
            strerror(&e)
        )
    })?;
    log::notice(format_args!(
        "Successfully migrated an old-style AOF file ({}) into the AOF directory ({}).",
        p.name,
        p.dir
            .file_name()
            .map_or_else(String::new, |d| d.to_string_lossy().into_owned())
    ));
    Ok(())
}

/// Loads the file set at `p` into `nshards` fresh shards, replaying every
/// command through the normal handlers with `cfg` (start-up, DEBUG
/// LOADAOF), as Redis's `loadAppendOnlyFiles`: the base, then each incr
/// file in order; a file the manifest names but the disk lacks, a short
/// or unfinished (in MULTI) file other than the last or without
/// `aof-load-truncated`, a bad format or an unknown command fail the load.
/// While it loads, a deadline already past sets the key's TTL rather than
/// deleting it, and keys past their deadline are still there (Redis's
/// `server.loading`: they expire once loaded). `Ok(None)`: nothing to
/// load (no manifest, or only empty files). Function libraries go to the
/// process's registry, as FUNCTION LOAD's do: the caller empties it first
/// if it holds any.
pub fn load_from(p: &Paths, cfg: &Config, nshards: usize) -> Result<Option<LoadedAof>, String> {
    let mut files = read_manifest(p)?;
    upgrade_old_aof(p, &mut files)?;
    let order: Vec<&ManifestFile> = files
        .iter()
        .filter(|f| f.kind == 'b')
        .chain(files.iter().filter(|f| f.kind == 'i'))
        .collect();
    if order.is_empty() {
        return Ok(None);
    }
    let mut total = 0;
    for f in &order {
        match std::fs::metadata(p.dir.join(&f.name)) {
            Ok(m) => total += m.len(),
            Err(e) => {
                return Err(format!(
                    "Unable to obtain the AOF file {} length. stat: {}",
                    f.name,
                    strerror(&e)
                ))
            }
        }
    }
    if total == 0 {
        return Ok(None);
    }
    let started = Instant::now();
    let mut t = commands::testutil::TestServer::with_config(cfg.clone(), nshards);
    // Redis's AOF client: as a master's link (no ACL or OOM refusals), and
    // keys past their deadline kept and seen (`Shard::already_expired`).
    t.client.master = true;
    for sh in &mut t.shards {
        sh.expiry = engine::Expiry::Keep;
    }
    let mut n = 0u64;
    let mut rdb_keys = None;
    for (i, f) in order.iter().enumerate() {
        let last = i + 1 == order.len();
        let path = p.dir.join(&f.name);
        let file_started = Instant::now();
        let data = std::fs::read(&path).map_err(|e| {
            format!(
                "Fatal error: can't open the append log file {} for reading: {}",
                f.name,
                strerror(&e)
            )
        })?;
        if data.is_empty() {
            continue;
        }
        let mut from = 0;
        if data.starts_with(b"REDIS") {
            // An RDB base (Redis 7's `.base.rdb`, our rewrites), or the
            // preamble of a Redis 4 to 6 AOF (its command tail follows).
            let old_style = f.name == p.name;
            log::notice(format_args!(
                "{}",
                if old_style {
                    "Reading RDB preamble from AOF file..."
                } else {
                    "Reading RDB base file on AOF loading..."
                }
            ));
            let limits = commands::ctx::enc_limits_of(cfg);
            let (keys, end) = commands::persist::load_aof_base(&path, &mut t.shards, limits)
                .map_err(|e| {
                    log::warning(format_args!("{e}"));
                    if old_style {
                        format!("Error reading the RDB preamble of the AOF file {}, AOF loading aborted", f.name)
                    } else {
                        format!("Error reading the RDB base file {}, AOF loading aborted", f.name)
                    }
                })?;
            rdb_keys = Some((keys, 0));
            from = end as usize;
            if old_style {
                log::notice(format_args!("Reading the remaining AOF tail..."));
            }
        }
        let (ran, truncated) = replay(&mut t, &data, from, &path, &f.name, cfg.aof_load_truncated)?;
        n += ran;
        if truncated && !last {
            return Err("Fatal error: the truncated file is not the last file".into());
        }
        log::notice(format_args!(
            "DB loaded from {} file {}: {:.3} seconds",
            if f.kind == 'b' { "base" } else { "incr" },
            f.name,
            file_started.elapsed().as_secs_f64()
        ));
    }
    for sh in &mut t.shards {
        sh.expiry = engine::Expiry::Delete;
    }
    log::notice(format_args!(
        "DB loaded from append only file: {:.3} seconds",
        started.elapsed().as_secs_f64()
    ));
    Ok(Some(LoadedAof {
        shards: std::mem::take(&mut t.shards),
        commands: n,
        rdb_keys,
    }))
}

/// Replays one file's commands from byte `from`, as Redis's
/// `loadSingleAppendOnlyFile`; returns the number of commands run and
/// whether the file was truncated (a short read, or an unfinished MULTI,
/// with `aof-load-truncated`: the file is cut after its last whole command
/// or before the MULTI). Without `aof-load-truncated` either is an error.
fn replay(
    t: &mut commands::testutil::TestServer,
    data: &[u8],
    from: usize,
    path: &Path,
    name: &str,
    load_truncated: bool,
) -> Result<(u64, bool), String> {
    let mut pos = from;
    let mut n = 0;
    // Where the open MULTI starts (its commands run only at its EXEC).
    let mut multi_start: Option<usize> = None;
    let short_at = loop {
        if pos >= data.len() {
            match multi_start {
                None => return Ok((n, false)),
                Some(at) => {
                    log::warning(format_args!(
                        "Revert incomplete MULTI/EXEC transaction in AOF file {name}"
                    ));
                    break at;
                }
            }
        }
        if data[pos] == b'#' {
            // An annotation line (Redis's `aof-timestamp-enabled`).
            match data[pos..].iter().position(|&c| c == b'\n') {
                Some(i) => {
                    pos += i + 1;
                    continue;
                }
                None => break multi_start.unwrap_or(pos),
            }
        }
        match parse_cmd(&data[pos..]) {
            Parsed::Cmd(argv, used) => {
                let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                if refs[0].eq_ignore_ascii_case(b"multi") {
                    multi_start = Some(pos);
                } else if refs[0].eq_ignore_ascii_case(b"exec") {
                    multi_start = None;
                }
                let reply = t.raw(&refs);
                if reply.starts_with(b"-ERR unknown command") {
                    return Err(format!(
                        "Unknown command '{}' reading the append only file {name}",
                        String::from_utf8_lossy(refs[0])
                    ));
                }
                if reply.starts_with(b"-") && multi_start.is_none() {
                    log::warning(format_args!(
                        "Error replaying {} from the AOF: {}",
                        String::from_utf8_lossy(refs[0]),
                        String::from_utf8_lossy(&reply).trim_end()
                    ));
                }
                n += 1;
                pos += used;
                commands::persist::key_load_delay();
            }
            Parsed::Short => break multi_start.unwrap_or(pos),
            Parsed::Bad => {
                return Err(format!(
                    "Bad file format reading the append only file {name}: make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>"
                ));
            }
        }
    };
    // Redis's `uxeof`: an unexpected end of the file.
    if load_truncated {
        log::warning(format_args!(
            "!!! Warning: short read while loading the AOF file {name}!!!"
        ));
        log::warning(format_args!(
            "!!! Truncating the AOF {name} at offset {short_at} !!!"
        ));
        truncate(path, short_at);
        log::warning(format_args!(
            "AOF {name} loaded anyway because aof-load-truncated is enabled"
        ));
        if multi_start.is_some() {
            t.raw(&[b"DISCARD"]);
        }
        return Ok((n, true));
    }
    Err(format!(
        "Unexpected end of file reading the append only file {name}. You can: \
         1) Make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>. \
         2) Alternatively you can set the 'aof-load-truncated' configuration option to yes and restart the server."
    ))
}

fn truncate(path: &Path, len: usize) {
    if let Ok(f) = OpenOptions::new().write(true).open(path) {
        let _ = f.set_len(len as u64);
        let _ = f.sync_all();
    }
}

enum Parsed {
    Cmd(Vec<Vec<u8>>, usize),
    Short,
    Bad,
}

fn parse_cmd(b: &[u8]) -> Parsed {
    fn line(b: &[u8], pos: usize) -> Option<(&[u8], usize)> {
        let rel = b.get(pos..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&b[pos..pos + rel], pos + rel + 2))
    }
    fn num(l: &[u8]) -> Option<usize> {
        std::str::from_utf8(l).ok()?.parse().ok()
    }
    if b[0] != b'*' {
        return Parsed::Bad;
    }
    let Some((l, mut pos)) = line(b, 1) else {
        return Parsed::Short;
    };
    let Some(argc) = num(l).filter(|&n| n >= 1) else {
        return Parsed::Bad;
    };
    let mut argv = Vec::with_capacity(argc.min(1024));
    for _ in 0..argc {
        match b.get(pos) {
            None => return Parsed::Short,
            Some(b'$') => {}
            Some(_) => return Parsed::Bad,
        }
        let Some((l, p)) = line(b, pos + 1) else {
            return Parsed::Short;
        };
        let Some(len) = num(l) else {
            return Parsed::Bad;
        };
        if b.len() < p + len + 2 {
            return Parsed::Short;
        }
        if &b[p + len..p + len + 2] != b"\r\n" {
            return Parsed::Bad;
        }
        argv.push(b[p..p + len].to_vec());
        pos = p + len + 2;
    }
    Parsed::Cmd(argv, pos)
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

    #[test]
    fn commands_parse_and_torn_tails_are_short() {
        let b = b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n";
        assert!(matches!(parse_cmd(b), Parsed::Cmd(ref v, n) if v.len() == 2 && n == b.len()));
        for cut in 1..b.len() {
            assert!(matches!(parse_cmd(&b[..cut]), Parsed::Short), "{cut}");
        }
        assert!(matches!(parse_cmd(b"+OK\r\n"), Parsed::Bad));
        assert!(matches!(parse_cmd(b"*1\r\n$3\r\nabcXY"), Parsed::Bad));
    }
}
