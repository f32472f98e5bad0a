//! The users every thread shares, the ACL log, and the ACL file.
//!
//! A user is an [`Arc<User>`] handle whose rules are swapped whole
//! (`RwLock<Arc<Rules>>` plus a generation): a client holds the handle
//! ([`ClientAcl`]), so ACL SETUSER reaches connected clients at their
//! next command, as in Redis where clients point at the mutable user.
//! Every handle keeps one relaxed-load flag, [`User::unrestricted`], true
//! while some selector allows everything: dispatch tests only that for the
//! common case (the default user), so an unrestricted client pays one load
//! and a branch per command. A restricted client re-reads the rules only
//! when the generation moved, so its checks take no lock either.
//!
//! Deleted users (DELUSER, ACL LOAD) are marked and restricted, so a
//! client still holding one is refused and closed at its next command even
//! if the disconnection sweep missed it.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::rules::{has_spaces, merge_selectors, Rules};

/// One ACL user: a fixed name and replaceable rules.
pub struct User {
    pub name: Vec<u8>,
    rules: RwLock<Arc<Rules>>,
    gen: AtomicU64,
    open: AtomicBool,
    deleted: AtomicBool,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User({})", String::from_utf8_lossy(&self.name))
    }
}

impl User {
    fn new(name: &[u8], rules: Rules) -> Arc<User> {
        let open = rules.unrestricted();
        Arc::new(User {
            name: name.to_vec(),
            rules: RwLock::new(Arc::new(rules)),
            gen: AtomicU64::new(0),
            open: AtomicBool::new(open),
            deleted: AtomicBool::new(false),
        })
    }

    /// No check can fail for this user (the dispatch fast path).
    #[inline]
    pub fn unrestricted(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    pub fn deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// A snapshot of the rules.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, rules: Rules) {
        let open = rules.unrestricted() && !self.deleted();
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.gen.fetch_add(1, Ordering::AcqRel);
        self.open.store(open, Ordering::Release);
    }

    fn delete(&self) {
        self.deleted.store(true, Ordering::Release);
        self.open.store(false, Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }
}

/// An ACL SETUSER that took channel permissions from an existing user:
/// its pub/sub clients whose subscriptions the new list does not allow
/// are to be disconnected (Redis's `ACLKillPubsubClientsIfNeeded`).
#[derive(Debug)]
pub struct Revoked {
    pub user: Arc<User>,
    /// Every channel pattern of the new rules' selectors.
    pub channels: Vec<Vec<u8>>,
}

impl Revoked {
    /// Whether a client with `subs` loses a subscription: a channel or
    /// shard channel no pattern matches, or a pattern not among the
    /// patterns literally (Redis's `ACLCheckChannelAgainstList`).
    pub fn kills(&self, subs: &crate::pubsub::Subscriptions) -> bool {
        let allowed =
            |ch: &[u8], literal| super::check::channel_allowed(&self.channels, ch, literal);
        subs.patterns.iter().any(|p| !allowed(p, true))
            || subs
                .channels
                .iter()
                .chain(&subs.shard)
                .any(|c| !allowed(c, false))
    }
}

/// The new rules' channel patterns when they may deny a subscription the
/// old ones allowed; `None` when a new selector allows every channel or
/// every old pattern is among the new ones (Redis's two shortcuts).
fn revoked_channels(old: &Rules, new: &Rules) -> Option<Vec<Vec<u8>>> {
    if new.selectors.iter().any(|s| s.allchannels) {
        return None;
    }
    let upcoming: Vec<Vec<u8>> = new
        .selectors
        .iter()
        .flat_map(|s| s.channels.iter().cloned())
        .collect();
    let kept = old
        .selectors
        .iter()
        .all(|s| !s.allchannels && s.channels.iter().all(|p| upcoming.contains(p)));
    (!kept).then_some(upcoming)
}

/// A client's user and its cached rules.
#[derive(Clone, Debug, Default)]
pub struct ClientAcl {
    /// `None` until the first check: then the default user.
    pub user: Option<Arc<User>>,
    cached: Option<(u64, Arc<Rules>)>,
    /// Scratch for the keys of the call being checked.
    keys: Vec<(usize, u8)>,
}

impl ClientAcl {
    pub fn of(user: Arc<User>) -> Self {
        ClientAcl {
            user: Some(user),
            cached: None,
            keys: Vec::new(),
        }
    }

    /// Checks one call of command `id` against the user's current rules
    /// (re-read only when they changed). A deleted user may run nothing.
    /// No allocation and no lock once warm.
    pub fn check(
        &mut self,
        acl: &Acl,
        id: usize,
        args: resp::Args<'_>,
    ) -> Result<(), super::Denied> {
        let user = self.user.get_or_insert_with(|| acl.default_user());
        if user.deleted() {
            return Err(super::Denied::Command);
        }
        let gen = user.gen.load(Ordering::Acquire);
        if self.cached.as_ref().is_none_or(|(g, _)| *g != gen) {
            self.cached = Some((gen, user.rules()));
        }
        // INVARIANT: set just above.
        let rules = &self.cached.as_ref().expect("cached rules").1;
        super::check::check(rules, id, args, &mut self.keys)
    }

    /// The user's name (`default` before any check).
    pub fn name(&self) -> &[u8] {
        self.user.as_ref().map_or(b"default", |u| &u.name)
    }

    /// The current rules, re-read only when the user changed.
    pub fn rules(&mut self, acl: &Acl) -> (Arc<User>, Arc<Rules>) {
        let user = self.user.get_or_insert_with(|| acl.default_user()).clone();
        let gen = user.gen.load(Ordering::Acquire);
        match &self.cached {
            Some((g, r)) if *g == gen => (user, r.clone()),
            _ => {
                let r = user.rules();
                self.cached = Some((gen, r.clone()));
                (user, r)
            }
        }
    }
}

/// Why an ACL log entry was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the refused command came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

impl Context {
    pub fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

/// One ACL LOG entry.
#[derive(Clone, Debug)]
pub struct LogEntry {
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    pub ctime_ms: u64,
    pub client_info: String,
}

/// Entries within this many milliseconds of each other with the same
/// reason, context, object and user are merged (Redis's grouping).
const LOG_GROUPING_MS: u64 = 60_000;
/// Entries scanned for a match (Redis's `toscan`).
const LOG_SCAN: usize = 10;

/// The registry of users and the ACL log.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, Arc<User>>>,
    default: Arc<User>,
    log: Mutex<VecDeque<LogEntry>>,
    /// Wrong passwords (AUTH / HELLO AUTH) since start.
    pub denied_auth: AtomicU64,
}

impl Default for Acl {
    fn default() -> Self {
        Acl::new()
    }
}

impl Acl {
    pub fn new() -> Self {
        let default = User::new(b"default", Rules::default_user());
        let mut users = BTreeMap::new();
        users.insert(b"default".to_vec(), default.clone());
        Acl {
            users: RwLock::new(users),
            default,
            log: Mutex::new(VecDeque::new()),
            denied_auth: AtomicU64::new(0),
        }
    }

    pub fn default_user(&self) -> Arc<User> {
        self.default.clone()
    }

    /// Whether a new connection is authenticated without AUTH (the
    /// default user is on and nopass; Redis's `authRequired`).
    pub fn default_open(&self) -> bool {
        let r = self.default.rules();
        r.nopass() && r.enabled()
    }

    pub fn get(&self, name: &[u8]) -> Option<Arc<User>> {
        self.users
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every user, in name order (Redis's rax order).
    pub fn all(&self) -> Vec<Arc<User>> {
        self.users
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// ACL SETUSER: applies `ops` to a copy of the user's rules (or a new
    /// user's) and publishes them only if every one is valid. `Err` is the
    /// rest of Redis's error line after `ERR `.
    pub fn set_user(
        &self,
        name: &[u8],
        ops: &[&[u8]],
        pubsub_all: bool,
    ) -> Result<Option<Revoked>, Vec<u8>> {
        if has_spaces(name) {
            return Err(b"Usernames can't contain spaces or null characters".to_vec());
        }
        let merged = merge_selectors(ops).map_err(|i| {
            let mut e = b"Unmatched parenthesis in acl selector starting at '".to_vec();
            e.extend_from_slice(c_str(ops[i]));
            e.extend_from_slice(b"'.");
            e
        })?;
        let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
        let existing = users.get(name).cloned();
        let mut rules = match &existing {
            Some(u) => (*u.rules()).clone(),
            None => Rules::new(pubsub_all),
        };
        for op in &merged {
            if let Err(e) = rules.apply(op, pubsub_all) {
                let mut line = b"Error in ACL SETUSER modifier '".to_vec();
                line.extend_from_slice(c_str(op));
                line.extend_from_slice(b"': ");
                line.extend_from_slice(e.text().as_bytes());
                return Err(line);
            }
        }
        let revoked = match existing {
            Some(u) => {
                let revoked = revoked_channels(&u.rules(), &rules).map(|channels| Revoked {
                    user: u.clone(),
                    channels,
                });
                u.set(rules);
                revoked
            }
            None => {
                users.insert(name.to_vec(), User::new(name, rules));
                None
            }
        };
        Ok(revoked)
    }

    /// ACL DELUSER: removes the named users (never `default`, checked by
    /// the caller); returns the removed handles so their clients can be
    /// disconnected.
    pub fn delete(&self, names: &[&[u8]]) -> Vec<Arc<User>> {
        let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
        let mut gone = Vec::new();
        for n in names {
            if let Some(u) = users.remove(*n) {
                u.delete();
                gone.push(u);
            }
        }
        gone
    }

    /// `requirepass`: the default user's only password, or nopass when
    /// empty (Redis's `ACLUpdateDefaultUserPassword`).
    pub fn set_requirepass(&self, pass: Option<&[u8]>) {
        let mut r = (*self.default.rules()).clone();
        // INVARIANT: these rules are always valid.
        let _ = r.apply(b"resetpass", false);
        match pass {
            Some(p) => {
                let mut op = b">".to_vec();
                op.extend_from_slice(p);
                let _ = r.apply(&op, false);
            }
            None => {
                let _ = r.apply(b"nopass", false);
            }
        }
        self.default.set(r);
    }

    /// Checks a user name and password (Redis's `ACLCheckUserCredentials`).
    pub fn credentials(&self, name: &[u8], pass: &[u8]) -> Option<Arc<User>> {
        let u = self.get(name)?;
        let r = u.rules();
        (r.enabled() && r.password_ok(pass)).then_some(u)
    }

    /// Adds an entry to the ACL log, merging it into a recent similar one
    /// (Redis's `addACLLogEntry`); keeps at most `max_len` entries.
    pub fn log(&self, mut e: LogEntry, max_len: usize) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let found = log.iter().take(LOG_SCAN).position(|o| {
            o.reason == e.reason
                && o.context == e.context
                && o.ctime_ms.abs_diff(e.ctime_ms) <= LOG_GROUPING_MS
                && o.object == e.object
                && o.username == e.username
        });
        if let Some(i) = found {
            // INVARIANT: `i` was just found.
            let mut old = log.remove(i).expect("entry found");
            old.count += 1;
            old.ctime_ms = e.ctime_ms;
            old.client_info = std::mem::take(&mut e.client_info);
            log.push_front(old);
            return;
        }
        log.push_front(e);
        log.truncate(max_len);
    }

    /// The newest `n` entries.
    pub fn log_entries(&self, n: usize) -> Vec<LogEntry> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().take(n).cloned().collect()
    }

    pub fn log_reset(&self) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// `user` lines of the configuration, applied at start (Redis's
    /// `ACLLoadConfiguredUsers`); a `default` line resets the default user
    /// first. `Err`: Redis's log text.
    pub fn load_config_users(
        &self,
        lines: &[Vec<Vec<u8>>],
        pubsub_all: bool,
    ) -> Result<(), String> {
        for argv in lines {
            let Some((name, ops)) = argv.split_first() else {
                continue;
            };
            if has_spaces(name) {
                return Err("Spaces not allowed in ACL usernames".into());
            }
            let ops: Vec<&[u8]> = ops.iter().map(|o| o.as_slice()).collect();
            let merged = merge_selectors(&ops).map_err(|_| {
                format!(
                    "Unmatched parenthesis in acl selector for the user named '{}'",
                    String::from_utf8_lossy(name)
                )
            })?;
            let mut rules = if name == b"default" {
                let mut r = (*self.default.rules()).clone();
                let _ = r.apply(b"reset", pubsub_all);
                r
            } else {
                Rules::new(pubsub_all)
            };
            for op in &merged {
                rules.apply(op, pubsub_all).map_err(|e| {
                    format!(
                        "Error loading ACL rule '{}' for the user named '{}': {}",
                        String::from_utf8_lossy(op),
                        String::from_utf8_lossy(name),
                        e.text()
                    )
                })?;
            }
            if name == b"default" {
                self.default.set(rules);
            } else {
                self.users
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), User::new(name, rules));
            }
        }
        Ok(())
    }

    /// ACL LOAD (and `aclfile` at start): replaces every user with the
    /// file's, all or nothing (Redis's `ACLLoadFromFile`). Returns the
    /// users replaced (their clients are disconnected; the default user's
    /// handle is kept and only its rules change). `Err` is Redis's one-line
    /// description of every problem found.
    ///
    /// A relative `path` is read in `dir` (the configuration's `dir`, where
    /// Redis has moved its working directory); messages name it as given.
    pub fn load_file(
        &self,
        path: &str,
        dir: Option<&std::path::Path>,
        pubsub_all: bool,
    ) -> Result<Vec<Arc<User>>, String> {
        let text = std::fs::read(in_dir(dir, path)).map_err(|e| {
            format!(
                "Error loading ACLs, opening file '{path}': {}",
                strerror(&e)
            )
        })?;
        let mut errors = String::new();
        let mut fresh: BTreeMap<Vec<u8>, Rules> = BTreeMap::new();
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            let line = trim(raw, b" \t\r\n");
            if line.is_empty() {
                continue;
            }
            let argv: Vec<&[u8]> = line
                .split(|&b| b == b' ')
                .filter(|w| !w.is_empty())
                .collect();
            if argv.is_empty() {
                continue;
            }
            if argv[0] != b"user" || argv.len() < 2 {
                errors.push_str(&format!(
                    "{path}:{n} should start with user keyword followed by the username. "
                ));
                continue;
            }
            let name = argv[1];
            if has_spaces(name) {
                errors.push_str(&format!(
                    "'{path}:{n}: username '{}' contains invalid characters. ",
                    String::from_utf8_lossy(name)
                ));
                continue;
            }
            if fresh.contains_key(name) {
                errors.push_str(&format!(
                    "WARNING: Duplicate user '{}' found on line {n}. ",
                    String::from_utf8_lossy(name)
                ));
                continue;
            }
            let mut rules = Rules::new(pubsub_all);
            match merge_selectors(&argv[2..]) {
                Err(_) => errors.push_str(&format!(
                    "{path}:{n}: Unmatched parenthesis in selector definition."
                )),
                Ok(ops) => {
                    for op in ops {
                        let op = trim(&op, b"\t\r\n");
                        if let Err(e) = rules.apply(op, pubsub_all) {
                            errors.push_str(&format!("{path}:{n}: {}. ", e.text()));
                        }
                    }
                }
            }
            fresh.insert(name.to_vec(), rules);
        }
        if !errors.is_empty() {
            errors.push_str(
                "WARNING: ACL errors detected, no change to the previously active ACL rules was \
                 performed",
            );
            return Err(errors);
        }
        let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
        let default_rules = fresh
            .remove(&b"default"[..])
            .unwrap_or_else(Rules::default_user);
        self.default.set(default_rules);
        let mut gone = Vec::new();
        for (name, u) in std::mem::take(&mut *users) {
            if name != b"default" {
                u.delete();
                gone.push(u);
            }
        }
        users.insert(b"default".to_vec(), self.default.clone());
        for (name, rules) in fresh {
            let u = User::new(&name, rules);
            users.insert(name, u);
        }
        Ok(gone)
    }

    /// ACL SAVE: every user in ACL LIST's form, written to a temporary
    /// file renamed over `path` (in `dir` if relative, see [`Acl::load_file`]).
    pub fn save_file(&self, path: &str, dir: Option<&std::path::Path>) -> std::io::Result<()> {
        let path = in_dir(dir, path);
        let mut text = Vec::new();
        for u in self.all() {
            text.extend_from_slice(b"user ");
            text.extend_from_slice(&u.name);
            text.push(b' ');
            text.extend_from_slice(&u.rules().describe());
            text.push(b'\n');
        }
        let tmp = format!(
            "{}.tmp-{}-{}",
            path.display(),
            std::process::id(),
            engine::now_ms()
        );
        let res = std::fs::write(&tmp, &text).and_then(|_| std::fs::rename(&tmp, &path));
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res
    }
}

/// `path` in `dir` when it is relative (Redis chdirs to `dir` at start and
/// on CONFIG SET dir; Tessera keeps its working directory).
fn in_dir(dir: Option<&std::path::Path>, path: &str) -> std::path::PathBuf {
    match dir {
        Some(d) if std::path::Path::new(path).is_relative() => d.join(path),
        _ => std::path::PathBuf::from(path),
    }
}

fn trim<'a>(mut s: &'a [u8], set: &[u8]) -> &'a [u8] {
    while let Some((f, rest)) = s.split_first() {
        if !set.contains(f) {
            break;
        }
        s = rest;
    }
    while let Some((l, rest)) = s.split_last() {
        if !set.contains(l) {
            break;
        }
        s = rest;
    }
    s
}

/// The C library's text for an I/O error, as Redis prints `strerror(errno)`.
fn strerror(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        // SAFETY: strerror returns a pointer to a static NUL-terminated
        // string for any errno value; it is copied before the next call.
        Some(n) => unsafe { std::ffi::CStr::from_ptr(libc::strerror(n)) }
            .to_string_lossy()
            .into_owned(),
        None => e.to_string(),
    }
}

/// Redis's `%s`: bytes up to the first NUL.
pub fn c_str(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_user_is_all_or_nothing() {
        let acl = Acl::new();
        acl.set_user(b"u", &[b"on", b">p", b"+get"], false).unwrap();
        let e = acl
            .set_user(b"u", &[b"off", b"+nosuch"], false)
            .unwrap_err();
        assert_eq!(
            e,
            b"Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
        );
        assert!(acl.get(b"u").unwrap().rules().enabled());
        assert_eq!(
            acl.set_user(b"a b", &[], false).unwrap_err(),
            b"Usernames can't contain spaces or null characters"
        );
        assert_eq!(
            acl.set_user(b"u", &[b"(~a", b"+get"], false).unwrap_err(),
            b"Unmatched parenthesis in acl selector starting at '(~a'."
        );
    }

    #[test]
    fn handles_follow_changes() {
        let acl = Acl::new();
        acl.set_user(b"u", &[b"on", b"nopass", b"+@all", b"~*", b"&*"], false)
            .unwrap();
        let u = acl.credentials(b"u", b"x").unwrap();
        assert!(u.unrestricted());
        let mut client = ClientAcl::of(u.clone());
        acl.set_user(b"u", &[b"-get"], false).unwrap();
        assert!(!u.unrestricted());
        let (_, r) = client.rules(&acl);
        assert!(!r.unrestricted());
        acl.delete(&[b"u"]);
        assert!(u.deleted() && !u.unrestricted());
        assert!(acl.get(b"u").is_none());
    }

    #[test]
    fn requirepass_is_the_default_password() {
        let acl = Acl::new();
        assert!(acl.default_open());
        acl.set_requirepass(Some(b"pw"));
        assert!(!acl.default_open());
        assert!(acl.credentials(b"default", b"pw").is_some());
        assert!(acl.credentials(b"default", b"no").is_none());
        acl.set_requirepass(None);
        assert!(acl.default_open());
    }

    #[test]
    fn log_groups_similar_entries() {
        let acl = Acl::new();
        let e = |obj: &str, t: u64| LogEntry {
            count: 1,
            reason: Reason::Key,
            context: Context::Toplevel,
            object: obj.into(),
            username: b"u".to_vec(),
            ctime_ms: t,
            client_info: String::new(),
        };
        acl.log(e("a", 1000), 128);
        acl.log(e("a", 2000), 128);
        acl.log(e("b", 2000), 128);
        acl.log(e("a", 100_000), 128);
        let l = acl.log_entries(10);
        assert_eq!(l.len(), 3);
        assert_eq!((l[0].object.as_slice(), l[0].count), (&b"a"[..], 1));
        assert_eq!((l[2].object.as_slice(), l[2].count), (&b"a"[..], 2));
        acl.log(e("c", 100_000), 2);
        assert_eq!(acl.log_entries(10).len(), 2);
    }

    #[test]
    fn file_round_trip() {
        let dir = std::env::temp_dir().join(format!("tessera-acl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("users.acl").display().to_string();
        let acl = Acl::new();
        acl.set_user(b"u", &[b"on", b">p", b"~a*", b"+get", b"(+set ~b)"], false)
            .unwrap();
        acl.save_file(&path, None).unwrap();
        let other = Acl::new();
        other.load_file(&path, None, false).unwrap();
        let list =
            |a: &Acl| -> Vec<Vec<u8>> { a.all().iter().map(|u| u.rules().describe()).collect() };
        assert_eq!(list(&acl), list(&other));
        std::fs::write(&path, "user x on +nosuch\nbogus\n").unwrap();
        let e = other.load_file(&path, None, false).unwrap_err();
        assert!(
            e.contains(":1: Unknown command or category name in ACL. "),
            "{e}"
        );
        assert!(e.contains(":2 should start with user keyword"), "{e}");
        assert!(other.get(b"u").is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
