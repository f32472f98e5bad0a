//! The function libraries (Redis 7.0 functions): one registry for every
//! thread of a server, as the script cache (`cache`). FUNCTION LOAD,
//! DELETE, FLUSH and RESTORE change it; FCALL finds its function here, then
//! has its own thread's VM load the library's code if that VM has not yet
//! (see `load`): a library is compiled once per thread that calls it,
//! never per call.
//!
//! # One registry per server
//!
//! The registry is the server's: a field of its `Ops` (`ops.functions`,
//! `'static` as `Ops` is), reached by FCALL on its shard through
//! `ShardCtx::ops` (one pointer load, as the process-wide `OnceLock` it
//! was cost a load and a check), by the FUNCTION commands and INFO
//! through `server.ops`, by a thread's function VM through the `Ops` it
//! serves (`vm`), and by the RDB writers through `Persist`. Process-wide,
//! the servers of unit tests in one process saw each other's libraries
//! (one test's FUNCTION FLUSH deleted another's). Start-up loads an RDB
//! file's libraries into the server's `Ops`, made before the server
//! (`ServerShared::with_ops`); the AOF loader replays into a server of its
//! own and hands its libraries over (`LoadedAof::functions`).
//!
//! Every library has an `id`, unique for the process's life (a
//! process-wide counter, [`next_id`]: libraries move from the AOF loader's
//! registry to the server's): a VM keeps what it loaded under the
//! library's name and id, so a library replaced (FUNCTION LOAD REPLACE,
//! RESTORE REPLACE) or deleted is never run from a VM's stale copy. The
//! registry's generation tells a VM that something changed, so that it
//! drops what is gone.
//!
//! Function names are case-insensitive (Redis's functions dictionary);
//! library names are not. Libraries are listed in name order (Redis lists
//! them in its dictionary's hash order, which nobody can rely on).
//!
//! Memory: bounded by what clients load, as in Redis.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::shebang::ScriptFlags;

/// One function of a library, as registered.
#[derive(Debug, Clone)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<Vec<u8>>,
    pub flags: ScriptFlags,
    /// Its calls from another loop hop rather than run by a call.
    pub hop: super::cache::HopMark,
}

/// A loaded library.
#[derive(Debug)]
pub struct Library {
    pub name: String,
    /// The whole code, shebang included (FUNCTION LIST WITHCODE, DUMP).
    pub code: Box<[u8]>,
    /// Length of the shebang line (the code compiles from its newline, so
    /// line numbers count it).
    pub shebang_len: usize,
    /// Unique for the process's life (see the module documentation).
    pub id: u64,
    /// In registration order.
    pub functions: Vec<FunctionInfo>,
}

/// The registry's content.
#[derive(Default, Clone)]
pub struct Libraries {
    pub libs: BTreeMap<String, Arc<Library>>,
    /// Lower-cased function name → its library and index there.
    funcs: HashMap<String, (Arc<Library>, usize)>,
}

impl Libraries {
    pub fn function(&self, name: &[u8]) -> Option<(Arc<Library>, usize)> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        self.funcs.get(&name).cloned()
    }

    /// The name of a function of `lib` that another library already has.
    pub fn collision<'l>(&self, lib: &'l Library) -> Option<&'l str> {
        lib.functions
            .iter()
            .find(|f| self.funcs.contains_key(&f.name.to_ascii_lowercase()))
            .map(|f| f.name.as_str())
    }

    pub fn link(&mut self, lib: Arc<Library>) {
        for (i, f) in lib.functions.iter().enumerate() {
            self.funcs
                .insert(f.name.to_ascii_lowercase(), (lib.clone(), i));
        }
        self.libs.insert(lib.name.clone(), lib);
    }

    pub fn unlink(&mut self, name: &str) -> Option<Arc<Library>> {
        let lib = self.libs.remove(name)?;
        for f in &lib.functions {
            self.funcs.remove(&f.name.to_ascii_lowercase());
        }
        Some(lib)
    }

    pub fn function_count(&self) -> usize {
        self.funcs.len()
    }
}

/// One server's libraries (see "One registry per server" above).
#[derive(Default)]
pub struct Registry {
    inner: RwLock<Libraries>,
    /// Bumped by every change.
    gen: AtomicU64,
}

/// A new library id, unique for the process's life (see the module
/// documentation: process state by nature, as the ids outlive a move
/// between registries).
pub fn next_id() -> u64 {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    NEXT_ID.fetch_add(1, Ordering::Relaxed) + 1
}

impl Registry {
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Libraries> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the registry under its lock; the generation moves on.
    pub fn update<R>(&self, f: impl FnOnce(&mut Libraries) -> R) -> R {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut g);
        self.gen.fetch_add(1, Ordering::AcqRel);
        r
    }

    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// The libraries' codes, in name order (FUNCTION DUMP, RDB files).
    pub fn codes(&self) -> Vec<Arc<Library>> {
        self.read().libs.values().cloned().collect()
    }
}

/// A library's metadata: its name and where its code starts (Redis's
/// `functionExtractLibMetaData`). Errors are Redis's texts without `ERR `.
pub fn parse_metadata(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&c| c == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    let parts = config::split_args(&code[..end]).ok_or("Invalid library metadata")?;
    let Some(first) = parts.first() else {
        return Err("Invalid library metadata".into());
    };
    let engine = &first[2.min(first.len())..];
    let mut name: Option<&[u8]> = None;
    for p in &parts[1..] {
        if p.len() >= 5 && p[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(&p[5..]);
            continue;
        }
        return Err(format!(
            "Invalid metadata value given: {}",
            String::from_utf8_lossy(p)
        ));
    }
    let Some(name) = name else {
        return Err("Library name was not given".into());
    };
    if !valid_name(name) {
        return Err(NAME_ERROR.into());
    }
    if !engine.eq_ignore_ascii_case(b"lua") {
        return Err(format!(
            "Engine '{}' not found",
            String::from_utf8_lossy(engine)
        ));
    }
    // INVARIANT: valid_name allows ASCII only.
    Ok((String::from_utf8(name.to_vec()).expect("ASCII"), end))
}

/// Redis 7.0.15 gives this text for bad function names too.
pub const NAME_ERROR: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// `[A-Za-z0-9_]+` (Redis's `functionsVerifyName`).
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_as_redis() {
        assert_eq!(parse_metadata(b"#!lua name=a\nx"), Ok(("a".into(), 12)));
        assert_eq!(parse_metadata(b"#!LUA name=\"b\"\nx"), Ok(("b".into(), 14)));
        assert_eq!(
            parse_metadata(b"return 1"),
            Err("Missing library metadata".into())
        );
        assert_eq!(
            parse_metadata(b"#!lua"),
            Err("Invalid library metadata".into())
        );
        assert_eq!(
            parse_metadata(b"#!lua   \nx"),
            Err("Library name was not given".into())
        );
        assert_eq!(parse_metadata(b"#!lua name=\nx"), Err(NAME_ERROR.into()));
        assert_eq!(parse_metadata(b"#!lua name=a-b\nx"), Err(NAME_ERROR.into()));
        assert_eq!(
            parse_metadata(b"#!luax name=ab\nx"),
            Err("Engine 'luax' not found".into())
        );
        assert_eq!(
            parse_metadata(b"#!lua name=a name=b\nx"),
            Err("Invalid metadata value, name argument was given multiple times".into())
        );
        assert_eq!(
            parse_metadata(b"#!lua name=a foo=bar\nx"),
            Err("Invalid metadata value given: foo=bar".into())
        );
    }
}
