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

pub fn parse_manifest(text: &str) -> Result<Vec<ManifestFile>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let (mut name, mut seq, mut kind) = (None, None, None);
        for kv in w.chunks(2) {
            if kv.len() != 2 {
                return Err(format!("Invalid AOF manifest file format: {line}"));
            }
            match kv[0] {
                "file" => name = Some(kv[1].to_string()),
                "seq" => seq = kv[1].parse::<u64>().ok(),
                "type" => kind = kv[1].chars().next(),
                _ => {}
            }
        }
        match (name, seq, kind) {
            (Some(name), Some(seq), Some(kind)) => out.push(ManifestFile { name, seq, kind }),
            _ => return Err(format!("Invalid AOF manifest file format: {line}")),
        }
    }
    Ok(out)
}

/// Writes the manifest atomically (temporary file, fsync, rename).
pub fn write_manifest(p: &Paths, files: &[ManifestFile]) -> std::io::Result<()> {
    let mut text = String::new();
    for f in files {
        text.push_str(&format!("file {} seq {} type {}\n", f.name, f.seq, f.kind));
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

/// Opens (creating if needed) the file set; returns the incr file to
/// append to.
pub fn open_files(p: &Paths) -> Result<File, String> {
    std::fs::create_dir_all(&p.dir)
        .map_err(|e| format!("Can't create the append-only dir {}: {e}", p.dir.display()))?;
    let files = match std::fs::read_to_string(p.manifest()) {
        Ok(t) => parse_manifest(&t)?,
        Err(_) => {
            let base = ManifestFile {
                name: format!("{}.1.base.aof", p.name),
                seq: 1,
                kind: 'b',
            };
            let incr = ManifestFile {
                name: format!("{}.1.incr.aof", p.name),
                seq: 1,
                kind: 'i',
            };
            File::create(p.dir.join(&base.name))
                .and_then(|f| f.sync_all())
                .map_err(|e| format!("Can't create the AOF base file: {e}"))?;
            write_manifest(p, &[base, incr.clone()])
                .map_err(|e| format!("Can't write the AOF manifest: {e}"))?;
            vec![incr]
        }
    };
    let incr = files
        .iter()
        .rfind(|f| f.kind == 'i')
        .ok_or("The AOF manifest names no incr file")?;
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(p.dir.join(&incr.name))
        .map_err(|e| format!("Can't open the append only file {}: {e}", incr.name))
}

// ------------------------------------------------------------------ loading

/// Loads the AOF file set under `cfg`'s `dir` (start-up) into `nshards`
/// shards; see [`load_from`].
pub fn load(cfg: &Config, nshards: usize) -> Result<Option<LoadedAof>, String> {
    load_from(&Paths::of(cfg), cfg, nshards)
}

/// Loads the file set at `p` into `nshards` fresh shards, replaying every
/// command through the normal handlers with `cfg` (start-up, DEBUG
/// LOADAOF). `Ok(None)`: no manifest (nothing to load). The function
/// libraries are returned (`LoadedAof::functions`, from the registry of
/// the loader's own server) for the caller to install in its server's.
pub fn load_from(p: &Paths, cfg: &Config, nshards: usize) -> Result<Option<LoadedAof>, String> {
    let text = match std::fs::read_to_string(p.manifest()) {
        Ok(t) => t,
        Err(_) => return Ok(None),
    };
    let files = parse_manifest(&text)?;
    let started = Instant::now();
    let mut t = commands::testutil::TestServer::with_config(cfg.clone(), nshards);
    let mut n = 0u64;
    let mut rdb_keys = None;
    let order = files
        .iter()
        .filter(|f| f.kind == 'b')
        .chain(files.iter().filter(|f| f.kind == 'i'));
    let last_incr = files.iter().rposition(|f| f.kind == 'i');
    for (i, f) in order.enumerate() {
        let path = p.dir.join(&f.name);
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if f.kind == 'i' && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("Can't open the append-only file {}: {e}", f.name)),
        };
        if data.starts_with(b"REDIS") {
            // An RDB preamble (Redis 7's `.base.rdb`, and our rewrites).
            drop(data);
            let limits = commands::ctx::enc_limits_of(cfg);
            rdb_keys = commands::persist::load(&path, &mut t.shards, limits, t.server.ops)?;
            continue;
        }
        let is_last = last_incr.is_some() && i == files.len() - 1;
        n += replay(&mut t, &data, &path, cfg.aof_load_truncated, is_last)?;
    }
    // Leave the client state clean (an unterminated MULTI is dropped).
    if t.client.multi.is_some() {
        log::warning(format_args!(
            "Revert incomplete MULTI/EXEC transaction in AOF file"
        ));
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

/// Replays one file; returns the number of commands run.
fn replay(
    t: &mut commands::testutil::TestServer,
    data: &[u8],
    path: &Path,
    load_truncated: bool,
    last: bool,
) -> Result<u64, String> {
    let mut pos = 0;
    let mut n = 0;
    // Commands of an open MULTI run only at its EXEC.
    let mut multi_start: Option<usize> = None;
    while pos < data.len() {
        match parse_cmd(&data[pos..]) {
            Parsed::Cmd(argv, used) => {
                let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                if refs[0].eq_ignore_ascii_case(b"multi") {
                    multi_start = Some(pos);
                } else if refs[0].eq_ignore_ascii_case(b"exec") {
                    multi_start = None;
                }
                let reply = t.raw(&refs);
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
            Parsed::Short => {
                if !last || !load_truncated {
                    return Err(format!(
                        "Unexpected end of file reading the append only file {}. You can: \
                         1) Make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>. \
                         2) Alternatively you can set the 'aof-load-truncated' configuration option to yes and restart the server.",
                        path.display()
                    ));
                }
                log::warning(format_args!(
                    "!!! Warning: short read while loading the AOF file {}!!!",
                    path.display()
                ));
                log::warning(format_args!(
                    "!!! Truncating the AOF {} at offset {} !!!",
                    path.display(),
                    multi_start.unwrap_or(pos)
                ));
                truncate(path, multi_start.unwrap_or(pos));
                log::warning(format_args!(
                    "AOF loaded anyway because aof-load-truncated is enabled"
                ));
                if multi_start.is_some() {
                    t.raw(&[b"DISCARD"]);
                }
                return Ok(n);
            }
            Parsed::Bad => {
                return Err(format!(
                    "Bad file format reading the append only file {}: make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>",
                    path.display()
                ));
            }
        }
    }
    if let Some(at) = multi_start {
        log::warning(format_args!(
            "Revert incomplete MULTI/EXEC transaction in AOF file {}",
            path.display()
        ));
        t.raw(&[b"DISCARD"]);
        if last {
            truncate(path, at);
        }
    }
    Ok(n)
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
