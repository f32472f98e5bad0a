//! The AOF's file set on disk: where it lives (`dir/appenddirname/`),
//! opening it for appending at start-up, and loading the whole set (as
//! Redis 7.0's `loadAppendOnlyFiles`: an old-style AOF upgraded first) by
//! replaying every command through the normal handlers. Its manifest is
//! `aof_manifest`; the writer that appends to it is `aof`; rewrites that
//! change the set are `aof_rewrite`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use commands::persist::LoadedAof;
use config::Config;

use super::aof_manifest::{next_seq, read_manifest, write_manifest, ManifestFile};
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

/// C's `strerror` text of an I/O error (without Rust's " (os error N)").
pub(super) fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
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
        let seq = next_seq(&files, 'b');
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
            let seq = next_seq(&files, 'i');
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
/// load (no manifest, or only empty files). The function libraries are
/// returned (`LoadedAof::functions`, from the registry of the loader's own
/// server) for the caller to install in its server's.
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
            let (keys, end) =
                commands::persist::load_aof_base(&path, &mut t.shards, limits, t.server.ops)
                    .map_err(|e| {
                        log::warning(format_args!("{e}"));
                        if old_style {
                            format!(
                        "Error reading the RDB preamble of the AOF file {}, AOF loading aborted",
                        f.name
                    )
                        } else {
                            format!(
                                "Error reading the RDB base file {}, AOF loading aborted",
                                f.name
                            )
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
        functions: t.server.ops.functions.update(std::mem::take),
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
