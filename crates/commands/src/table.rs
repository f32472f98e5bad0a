//! The command table: one declarative entry per command (name, arity,
//! flags, key positions, how it executes). Dispatch, routing, `COMMAND`
//! and the per-command statistics all read it; nothing else decides how a
//! command runs.
//!
//! Each family module (`strings`, `keys`, ...) exports a `COMMANDS` slice;
//! [`registry`] flattens them once, with subcommands as `parent|sub`, and
//! gives every entry a dense id used to index per-thread statistics.

use std::collections::HashMap;
use std::sync::OnceLock;

use resp::Args;

use crate::coord::Coordinator;
use crate::ctx::{ConnCtx, ShardCtx};
use crate::error::CmdError;

/// Command flags, as in Redis's command table (`COMMAND INFO` prints them).
pub mod flags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const BLOCKING: u32 = 1 << 6;
    pub const LOADING: u32 = 1 << 7;
    pub const STALE: u32 = 1 << 8;
    pub const SKIP_MONITOR: u32 = 1 << 9;
    pub const SKIP_SLOWLOG: u32 = 1 << 10;
    pub const FAST: u32 = 1 << 11;
    pub const NO_AUTH: u32 = 1 << 12;
    pub const MAY_REPLICATE: u32 = 1 << 13;
    pub const SENTINEL: u32 = 1 << 14;
    pub const NO_MANDATORY_KEYS: u32 = 1 << 15;
    pub const PROTECTED: u32 = 1 << 16;
    pub const NO_ASYNC_LOADING: u32 = 1 << 17;
    pub const NO_MULTI: u32 = 1 << 18;
    pub const MOVABLE_KEYS: u32 = 1 << 19;
    pub const ALLOW_BUSY: u32 = 1 << 20;
    /// Not a Redis flag (never printed): the command runs a Lua script,
    /// which may write any key it declares and, on its own shard, keys it
    /// does not (EVAL, EVALSHA ...). Locks treat it as a writer.
    pub const SCRIPT: u32 = 1 << 21;
    /// Redis's `asking` (RESTORE-ASKING): in a cluster the command runs on
    /// a slot being imported; standalone it changes nothing.
    pub const ASKING: u32 = 1 << 22;

    /// Names in the order Redis prints them in `COMMAND INFO`.
    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (ASKING, "asking"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (MAY_REPLICATE, "may_replicate"),
        (SENTINEL, "sentinel"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (PROTECTED, "protected"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MULTI, "no_multi"),
        (MOVABLE_KEYS, "movablekeys"),
        (ALLOW_BUSY, "allow_busy"),
    ];
}

/// Runs on one shard with its data (the keys' shard, or any shard for a
/// keyless data command).
pub type ShardHandler = fn(&mut ShardCtx<'_>, Args<'_>) -> Result<(), CmdError>;
/// Runs on the connection's home thread with connection state only.
pub type ConnHandler = fn(&mut ConnCtx<'_>, Args<'_>) -> Result<(), CmdError>;
/// Parses and validates the whole command, then returns the coordinator
/// that will run it across shards. Nothing may be mutated before it
/// returns `Ok`.
pub type CoordBuilder = fn(&mut ConnCtx<'_>, Args<'_>) -> Result<Box<dyn Coordinator>, CmdError>;
/// Computes key argument positions when first/last/step cannot.
pub type GetKeys = fn(Args<'_>) -> Vec<usize>;
/// The locks of a coordinated command whose key arguments do not name
/// everything it touches (SORT with BY/GET patterns reads keys named by
/// the source's elements), from its arguments, database and shard count,
/// and the server (WATCH takes none while a long script holds its keys'
/// shards: `multi::watch_locks`). `None` keeps dispatch's default (the
/// declared keys when they span shards).
pub type LockPlan =
    fn(Args<'_>, usize, usize, &crate::ctx::ServerShared) -> Option<crate::tx::LockSet>;

/// How a command executes.
#[derive(Clone, Copy)]
pub enum Exec {
    /// Its keys live on one shard: run there (inline when that is the
    /// connection's home shard, through a hop otherwise). If the keys span
    /// shards and a coordinator is given, the coordinator runs instead.
    Shard(ShardHandler, Option<CoordBuilder>),
    /// Connection state only (PING, SELECT, HELLO, CLIENT SETNAME ...).
    Conn(ConnHandler),
    /// Always coordinated (fan-out to every shard: DBSIZE, KEYS, FLUSHALL).
    Coord(CoordBuilder),
    /// A container whose first argument selects a subcommand.
    Parent,
}

/// Key positions, Redis's legacy (first, last, step) triple. `last < 0`
/// counts from the end (`-1` = the last argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys {
    pub first: i32,
    pub last: i32,
    pub step: i32,
}

pub const NO_KEYS: Keys = Keys {
    first: 0,
    last: 0,
    step: 0,
};

pub const fn keys(first: i32, last: i32, step: i32) -> Keys {
    Keys { first, last, step }
}

/// One entry of the command table.
pub struct CommandSpec {
    /// Lower case, as Redis names it (`get`, `setname` under `client`).
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub exec: Exec,
    /// ACL categories without the `@`, e.g. `&["read", "string", "fast"]`.
    pub acl: &'static [&'static str],
    /// For commands whose keys need parsing (MOVABLE_KEYS).
    pub getkeys: Option<GetKeys>,
    /// For `Exec::Coord` commands whose locks depend on their arguments.
    pub locks: Option<LockPlan>,
    pub subcommands: &'static [CommandSpec],
}

impl CommandSpec {
    pub const fn new(
        name: &'static str,
        arity: i32,
        flags: u32,
        keys: Keys,
        exec: Exec,
        acl: &'static [&'static str],
    ) -> Self {
        CommandSpec {
            name,
            arity,
            flags,
            keys,
            exec,
            acl,
            getkeys: None,
            locks: None,
            subcommands: &[],
        }
    }
    pub const fn parent(
        name: &'static str,
        arity: i32,
        flags: u32,
        acl: &'static [&'static str],
        subcommands: &'static [CommandSpec],
    ) -> Self {
        CommandSpec {
            name,
            arity,
            flags,
            keys: NO_KEYS,
            exec: Exec::Parent,
            acl,
            getkeys: None,
            locks: None,
            subcommands,
        }
    }
    pub const fn with_getkeys(mut self, f: GetKeys) -> Self {
        self.getkeys = Some(f);
        self
    }
    pub const fn with_locks(mut self, f: LockPlan) -> Self {
        self.locks = Some(f);
        self
    }

    #[inline]
    pub fn arity_ok(&self, argc: usize) -> bool {
        let a = self.arity;
        (a >= 0 && argc == a as usize) || (a < 0 && argc >= (-a) as usize)
    }

    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Whether the command may change data: a write command, or a script
    /// (which may write whatever its flags say). Locks and the scratch
    /// coordinator treat both as writers.
    pub fn may_write(&self) -> bool {
        self.has(flags::WRITE) || self.has(flags::SCRIPT)
    }

    /// Positions of the key arguments of this invocation.
    pub fn key_positions(&self, args: Args<'_>, out: &mut Vec<usize>) {
        out.clear();
        if let Some(f) = self.getkeys {
            out.extend(f(args));
            return;
        }
        let Keys { first, last, step } = self.keys;
        if first <= 0 || step <= 0 {
            return;
        }
        let argc = args.len() as i32;
        let last = if last < 0 {
            argc + last
        } else {
            last.min(argc - 1)
        };
        let mut i = first;
        while i <= last {
            out.push(i as usize);
            i += step;
        }
    }
}

/// A resolved command: its dense id (index into [`Registry::specs`]), its
/// spec, and its full name (`get`, `client|list`).
#[derive(Clone, Copy)]
pub struct Resolved {
    pub id: usize,
    pub spec: &'static CommandSpec,
}

/// All commands, flattened, with dense ids.
pub struct Registry {
    /// `(full name, spec, parent)`, ids are indexes.
    pub specs: Vec<(String, &'static CommandSpec, Option<&'static CommandSpec>)>,
    /// Each command's ACL categories as bits (`acl::cats`), computed once
    /// from `CommandSpec::acl`; indexed like `specs`.
    pub cats: Vec<u32>,
    // foldhash, not SipHash: names are looked up once per request and
    // come from a fixed table, so flooding resistance buys nothing here.
    top: HashMap<NameKey, usize, foldhash::fast::FixedState>,
    sub: HashMap<(usize, String), usize, foldhash::fast::FixedState>,
}

/// Every family's command table (a family adds one line here).
pub fn families() -> &'static [&'static [CommandSpec]] {
    FAMILIES
}

const FAMILIES: &[&[CommandSpec]] = &[
    crate::strings::COMMANDS,
    crate::keys::COMMANDS,
    crate::connection::COMMANDS,
    crate::server::COMMANDS,
    crate::multi::COMMANDS,
    crate::hash::COMMANDS,
    crate::list::COMMANDS,
    crate::set::COMMANDS,
    crate::zset::COMMANDS,
    crate::memory::COMMANDS,
    crate::sort::COMMANDS,
    crate::persist::COMMANDS,
    crate::dump::COMMANDS,
    crate::migrate::COMMANDS,
    crate::cluster::COMMANDS,
    crate::module::COMMANDS,
    crate::lolwut::COMMANDS,
    crate::repl::cmds::COMMANDS,
    crate::repl::failover::COMMANDS,
    crate::replica::COMMANDS,
    crate::bitmap::COMMANDS,
    crate::hll::COMMANDS,
    crate::pubsub::COMMANDS,
    crate::geo::COMMANDS,
    crate::stream::COMMANDS,
    crate::script::COMMANDS,
    crate::script::function::COMMANDS,
    crate::acl::COMMANDS,
    crate::ops::COMMANDS,
];

static REG: OnceLock<Registry> = OnceLock::new();

pub fn registry() -> &'static Registry {
    REG.get_or_init(build)
}

/// Applies the config file's `rename-command` lines to the table (Redis's
/// `loadServerConfigFromString`): the command answers to its new name only
/// (an empty name removes it); COMMAND and the statistics keep its own
/// name. Must run before anything reads the table (start-up); the table
/// is the process's, as Redis's. Errors: `(line number, line, reason)`
/// with Redis's reason.
pub fn apply_renames(renames: &[config::RenameCommand]) -> Result<(), (usize, String, String)> {
    if renames.is_empty() {
        return Ok(());
    }
    let mut r = build();
    for rc in renames {
        let fail = |why: &str| (rc.line_no, rc.line.clone(), why.to_string());
        let from = String::from_utf8_lossy(&rc.from).to_ascii_lowercase();
        let Some(id) = NameKey::new(from.as_bytes()).and_then(|k| r.top.remove(&k)) else {
            return Err(fail("No such command in rename-command"));
        };
        if rc.to.is_empty() {
            continue;
        }
        let to = String::from_utf8_lossy(&rc.to).to_ascii_lowercase();
        // A name longer than any key can never be called (as before).
        let Some(to) = NameKey::new(to.as_bytes()) else {
            continue;
        };
        if r.top.contains_key(&to) {
            return Err(fail("Target command name already exists"));
        }
        r.top.insert(to, id);
    }
    REG.set(r).map_err(|_| {
        (
            0,
            String::new(),
            "rename-command after the command table was built".to_string(),
        )
    })
}

fn build() -> Registry {
    {
        let mut r = Registry {
            specs: Vec::new(),
            cats: Vec::new(),
            top: HashMap::default(),
            sub: HashMap::default(),
        };
        for fam in families() {
            for spec in *fam {
                let id = r.specs.len();
                r.specs.push((spec.name.to_string(), spec, None));
                // INVARIANT: every name in the tables fits a key (32 bytes).
                let key = NameKey::new(spec.name.as_bytes()).expect("short name");
                let dup = r.top.insert(key, id);
                assert!(dup.is_none(), "duplicate command {}", spec.name);
                for s in spec.subcommands {
                    let sid = r.specs.len();
                    r.specs
                        .push((format!("{}|{}", spec.name, s.name), s, Some(spec)));
                    r.sub.insert((id, s.name.to_string()), sid);
                }
            }
        }
        r.cats = r
            .specs
            .iter()
            .map(|(_, s, _)| crate::acl::cats::bits(s.acl))
            .collect();
        r
    }
}

/// A top-level command name as the table looks it up: lower-cased,
/// zero-padded to 32 bytes and read as four words, with its length (so
/// `get\0` is not `get`). Found with one multiply per word and four word
/// compares: as a `&str` key the lookup (a UTF-8 check, then foldhash over
/// the bytes, then a memcmp) cost about 230 of a pipelined SETBIT's 3,100
/// instructions under callgrind.
#[derive(Clone, Copy, PartialEq, Eq)]
struct NameKey {
    words: [u64; 4],
    len: u8,
}

impl NameKey {
    /// `None` if `name` is longer than any command's name may be.
    #[inline]
    fn new(name: &[u8]) -> Option<NameKey> {
        let mut b = [0u8; 32];
        if name.len() > b.len() {
            return None;
        }
        for (d, s) in b.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Some(NameKey {
            words: [word(0), word(1), word(2), word(3)],
            len: name.len() as u8,
        })
    }
}

impl std::hash::Hash for NameKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let [a, b, c, d] = self.words;
        let m = a ^ b.wrapping_mul(K) ^ c.rotate_left(21) ^ d.rotate_left(43);
        h.write_u64(m ^ (u64::from(self.len) << 56));
    }
}

/// Lower-cases a command name into `buf` without allocating; `None` if it
/// is too long to be any command's name.
fn lower<'b>(name: &[u8], buf: &'b mut [u8; 32]) -> Option<&'b str> {
    if name.len() > buf.len() {
        return None;
    }
    let b = &mut buf[..name.len()];
    for (d, s) in b.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    std::str::from_utf8(b).ok()
}

impl Registry {
    /// Finds the command (and subcommand) for `args`, checking arity.
    pub fn resolve(&self, args: Args<'_>) -> Result<Resolved, CmdError> {
        let name = args.get(0);
        let mut buf = [0u8; 32];
        let id = NameKey::new(name)
            .and_then(|k| self.top.get(&k).copied())
            .ok_or_else(|| CmdError::UnknownCommand {
                name: name.to_vec(),
                args: args.iter().skip(1).map(|a| a.to_vec()).collect(),
            })?;
        let spec = self.specs[id].1;
        // A container descends into its subcommand; one with a handler of
        // its own (COMMAND) runs that handler when called bare.
        let parent = matches!(spec.exec, Exec::Parent);
        if !spec.subcommands.is_empty() && (parent || args.len() >= 2) {
            if args.len() < 2 {
                return Err(CmdError::WrongArity(spec.name.to_string()));
            }
            let sub = args.get(1);
            let sid = lower(sub, &mut buf)
                .and_then(|s| self.sub.get(&(id, s.to_string())).copied())
                .ok_or_else(|| CmdError::UnknownSubcommand {
                    sub: sub.to_vec(),
                    parent: spec.name.to_ascii_uppercase(),
                })?;
            let sspec = self.specs[sid].1;
            if !sspec.arity_ok(args.len()) {
                return Err(CmdError::WrongArity(self.specs[sid].0.clone()));
            }
            return Ok(Resolved {
                id: sid,
                spec: sspec,
            });
        }
        if !spec.arity_ok(args.len()) {
            return Err(CmdError::WrongArity(spec.name.to_string()));
        }
        Ok(Resolved { id, spec })
    }

    pub fn full_name(&self, id: usize) -> &str {
        &self.specs[id].0
    }

    /// The top-level command named `name` (any case).
    pub fn top(&self, name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        let id = *self.top.get(&NameKey::new(name)?)?;
        Some((id, self.specs[id].1))
    }

    /// The command named `name` as ACL rules and COMMAND write it: `get`
    /// or `client|list`, any case (Redis's `lookupCommandBySds`: a name
    /// with more than one `|`, or `|` after a command without
    /// subcommands, is no command).
    pub fn lookup_full(&self, name: &[u8]) -> Option<usize> {
        let mut parts = name.splitn(3, |&b| b == b'|');
        let (id, _) = self.top(parts.next()?)?;
        let Some(sub) = parts.next() else {
            return Some(id);
        };
        if parts.next().is_some() {
            return None;
        }
        let mut buf = [0u8; 32];
        let sub = lower(sub, &mut buf)?;
        self.sub.get(&(id, sub.to_string())).copied()
    }

    /// The ids of `id`'s subcommands (empty for a plain command): they
    /// follow their parent in the registry.
    pub fn children(&self, id: usize) -> std::ops::Range<usize> {
        let n = if self.specs[id].2.is_none() {
            self.specs[id].1.subcommands.len()
        } else {
            0
        };
        id + 1..id + 1 + n
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

/// The shard that owns `key`: its Redis Cluster hash slot, mapped onto
/// `nshards` contiguous slot ranges (as a cluster assigns slots to nodes).
#[inline]
pub fn shard_of(key: &[u8], nshards: usize) -> usize {
    if nshards == 1 {
        return 0;
    }
    ds::key_hash_slot(key) as usize * nshards / 16384
}

/// Where a keyed command must run.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// No key arguments.
    NoKeys,
    /// Every key on this shard.
    One(usize),
    /// Keys on several shards.
    Many,
}

/// Computes the target shard(s) of a command's keys.
pub fn target(
    spec: &CommandSpec,
    args: Args<'_>,
    nshards: usize,
    scratch: &mut Vec<usize>,
) -> Target {
    spec.key_positions(args, scratch);
    let mut it = scratch.iter();
    let Some(&first) = it.next() else {
        return Target::NoKeys;
    };
    let s = shard_of(args.get(first), nshards);
    for &p in it {
        if shard_of(args.get(p), nshards) != s {
            return Target::Many;
        }
    }
    Target::One(s)
}

#[cfg(test)]
mod name_key_tests {
    use super::*;

    #[test]
    fn names_resolve_in_any_case_and_nothing_else_does() {
        let reg = registry();
        let (id, spec) = reg.top(b"SetBit").expect("setbit");
        assert_eq!(spec.name, "setbit");
        assert_eq!(reg.top(b"setbit").map(|t| t.0), Some(id));
        // The padding is no part of the name: a NUL makes another name.
        assert!(reg.top(b"get\0").is_none());
        assert!(reg.top(b"ge").is_none());
        assert!(reg.top(b"gett").is_none());
        assert!(reg.top(b"").is_none());
        assert!(reg.top(&[b'a'; 33]).is_none());
        assert!(NameKey::new(&[b'a'; 32]).is_some());
        assert!(NameKey::new(b"GET") == NameKey::new(b"get"));
        // Every command of the table finds itself.
        for (id, (full, spec, parent)) in reg.specs.iter().enumerate() {
            if parent.is_none() {
                assert_eq!(
                    reg.top(full.as_bytes()).map(|t| t.0),
                    Some(id),
                    "{}",
                    spec.name
                );
            }
        }
    }
}
