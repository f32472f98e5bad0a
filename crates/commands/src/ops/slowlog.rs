//! SLOWLOG (Redis's `slowlog.c`): commands that ran longer than
//! `slowlog-log-slower-than` microseconds, newest first, at most
//! `slowlog-max-len` of them.
//!
//! One log for the whole process behind a mutex, taken only by a command
//! that was slow (by definition rare: the check on every command is a
//! comparison with the duration `exec::record` measures anyway, against a
//! relaxed load). Rejected: a log per thread merged on read. It would
//! spare a lock that only slow commands take, and cost SLOWLOG LEN and
//! RESET a round over every thread and GET a merge; ids would still need
//! one counter for the whole process.
//!
//! An entry is written where its command ran, which may be another thread
//! than its client's: it names the client by id, and by address and name
//! as Redis's entries do (Redis copies them into the entry when it writes
//! it): from the client at hand (commands run on the home thread), else
//! from the log's directory of connected clients ([`SlowLog::connected`],
//! kept by their home threads at accept, name changes and close). So
//! SLOWLOG GET needs no other thread, which a script that does not hold
//! every shard cannot ask (it may not wait for other threads: one may be
//! waiting for the script's shard). Rejected: looking the labels up at
//! GET time on every thread (what was done: a script saw only the loops
//! its run reached), and a reference to the label carried by every hop
//! (an atomic count per request, for a cold path). The directory costs a
//! write lock and an insert per connection at accept and at close (as
//! `tracking`'s), and about 100 bytes per connection. An entry written
//! after its client left (a command still running elsewhere) or for a
//! client not in the directory (a replication link) is labeled when found
//! at GET, as before, or left empty: SLOWLOG GET asks every thread for
//! the clients it does not know yet, and a client that disconnects first
//! leaves its label in its entries ([`SlowLog::forget_client`]).
//!
//! Arguments are kept as Redis keeps them: at most 32 (the last says how
//! many more there were), each at most 128 bytes (then how many more), and
//! passwords replaced by `(redacted)` ([`redacted`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use resp::{Args, Reply};

use crate::coord::{fan_out, ClientIo, Coordinator};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::util::eq_ic;

/// Redis's `SLOWLOG_ENTRY_MAX_ARGC` and `SLOWLOG_ENTRY_MAX_STRING`.
const MAX_ARGC: usize = 32;
const MAX_STRING: usize = 128;

/// Who sent a command: `(address, name)` as CLIENT LIST shows them.
pub type Label = (String, Vec<u8>);

/// The client id scripts' commands are logged under (Redis's Lua client,
/// whose address reads `?:0`).
pub const SCRIPT_CLIENT: u64 = 0;

#[derive(Clone, Debug)]
pub struct Entry {
    pub id: u64,
    pub time_s: u64,
    pub duration_us: u64,
    pub argv: Vec<Box<[u8]>>,
    pub client: u64,
    pub label: Option<Label>,
}

/// The log and its settings (see the module documentation).
pub struct SlowLog {
    /// `slowlog-log-slower-than` (µs); negative: off.
    pub threshold_us: AtomicI64,
    pub max_len: AtomicUsize,
    /// Entries without their client's address yet.
    unlabeled: AtomicUsize,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Entry>>,
    /// Each connected client, by id (see the module documentation): its
    /// address and name, and what CLIENT LIST from a script shows of it
    /// before its loop publishes its line (see `connection::Listing`).
    /// Never held with `entries`.
    labels: RwLock<HashMap<u64, Known>>,
}

/// A connected client as the directory knows it: what never changes
/// after its accept, and its name (kept by CLIENT SETNAME, HELLO SETNAME
/// and RESET wherever they run).
#[derive(Clone, Debug)]
pub struct Known {
    pub label: Label,
    pub laddr: String,
    pub fd: i32,
    pub unix: bool,
    pub created_ms: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Argument positions Redis replaces with `(redacted)` in the slowlog and
/// MONITOR: passwords of AUTH, HELLO AUTH, MIGRATE AUTH/AUTH2, sensitive
/// CONFIG SET values and every ACL SETUSER rule (its name included).
/// `name`: the command's full name.
pub fn redacted(name: &str, args: Args<'_>) -> Vec<usize> {
    let n = args.len();
    match name {
        "auth" => (1..n).collect(),
        "acl|setuser" => (2..n).collect(),
        "hello" => {
            let mut v = Vec::new();
            let mut i = 2;
            while i < n {
                let more = n - i - 1;
                if eq_ic(args.get(i), "auth") && more >= 2 {
                    v.extend([i + 1, i + 2]);
                    i += 2;
                } else if eq_ic(args.get(i), "setname") && more >= 1 {
                    i += 1;
                }
                i += 1;
            }
            v
        }
        "config|set" => (2..n)
            .step_by(2)
            .filter(|&i| {
                i + 1 < n
                    && ["masterauth", "masteruser", "requirepass"]
                        .iter()
                        .any(|s| eq_ic(args.get(i), s))
            })
            .map(|i| i + 1)
            .collect(),
        "migrate" => {
            let mut v = Vec::new();
            let mut i = 6;
            while i < n {
                let more = n - i - 1;
                if eq_ic(args.get(i), "auth") && more >= 1 {
                    v.push(i + 1);
                    i += 1;
                } else if eq_ic(args.get(i), "auth2") && more >= 2 {
                    v.extend([i + 1, i + 2]);
                    i += 2;
                } else if eq_ic(args.get(i), "keys") {
                    break;
                }
                i += 1;
            }
            v
        }
        _ => Vec::new(),
    }
}

/// The arguments as an entry keeps them (see the module documentation).
fn argv_of(name: &str, args: Args<'_>) -> Vec<Box<[u8]>> {
    let hidden = redacted(name, args);
    let argc = args.len();
    let kept = argc.min(MAX_ARGC);
    (0..kept)
        .map(|j| {
            if kept != argc && j == kept - 1 {
                return format!("... ({} more arguments)", argc - kept + 1)
                    .into_bytes()
                    .into();
            }
            if hidden.contains(&j) {
                return b"(redacted)".as_slice().into();
            }
            let a = args.get(j);
            if a.len() > MAX_STRING {
                let mut s = a[..MAX_STRING].to_vec();
                s.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes(),
                );
                return s.into();
            }
            a.into()
        })
        .collect()
}

impl SlowLog {
    pub fn new(threshold_us: i64, max_len: usize) -> Self {
        SlowLog {
            threshold_us: AtomicI64::new(threshold_us),
            max_len: AtomicUsize::new(max_len),
            unlabeled: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
            labels: RwLock::new(HashMap::new()),
        }
    }

    /// Client `c` connected: entries of its commands written on other
    /// threads carry its address and name.
    pub fn connected(&self, c: &ClientState) {
        let known = Known {
            label: label_of(c),
            laddr: c.laddr.clone(),
            fd: c.fd,
            unix: c.unix,
            created_ms: c.created_ms,
        };
        self.labels
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(c.id, known);
    }

    /// Client `c` changed its name (CLIENT SETNAME, HELLO SETNAME,
    /// RESET): later entries carry the new one.
    pub fn renamed(&self, c: &ClientState) {
        let mut labels = self
            .labels
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(k) = labels.get_mut(&c.id) {
            k.label.1 = c.name.clone().unwrap_or_default();
        }
    }

    /// Every connected client the directory knows, as of now (a copy:
    /// the lock is not held while the caller uses it). O(clients).
    pub fn known(&self) -> Vec<(u64, Known)> {
        self.labels
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(&id, k)| (id, k.clone()))
            .collect()
    }

    /// The address and name of connected client `id`.
    fn label(&self, id: u64) -> Option<Label> {
        self.labels
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .map(|k| k.label.clone())
    }

    /// Whether commands are logged at all.
    pub fn enabled(&self) -> bool {
        self.threshold_us.load(Ordering::Relaxed) >= 0
    }

    /// Whether a call of `us` microseconds goes to the log.
    #[inline]
    pub fn wants(&self, us: u64) -> bool {
        let t = self.threshold_us.load(Ordering::Relaxed);
        t >= 0 && us >= t as u64
    }

    /// Logs a call of command `name` (its full name) that took `us`.
    #[cold]
    pub fn push(&self, name: &str, args: Args<'_>, us: u64, client: u64, label: Option<Label>) {
        let label = match (client, label) {
            (SCRIPT_CLIENT, _) => Some(("?:0".to_string(), Vec::new())),
            (_, Some(l)) => Some(l),
            (id, None) => self.label(id),
        };
        let argv = argv_of(name, args);
        let time_s = engine::now_ms() / 1000;
        let max = self.max_len.load(Ordering::Relaxed);
        let mut log = lock(&self.entries);
        if label.is_none() {
            self.unlabeled.fetch_add(1, Ordering::Relaxed);
        }
        log.push_front(Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            time_s,
            duration_us: us,
            argv,
            client,
            label,
        });
        while log.len() > max {
            if let Some(e) = log.pop_back() {
                if e.label.is_none() {
                    self.unlabeled.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        lock(&self.entries).clear();
        self.unlabeled.store(0, Ordering::Relaxed);
    }

    /// The newest `n` entries.
    pub fn newest(&self, n: usize) -> Vec<Entry> {
        lock(&self.entries).iter().take(n).cloned().collect()
    }

    /// Client `c` is going away: it leaves the directory, and its entries
    /// keep its address and name. One relaxed load when every entry has
    /// them.
    pub fn forget_client(&self, c: &ClientState) {
        self.labels
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&c.id);
        if self.unlabeled.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut log = lock(&self.entries);
        for e in log
            .iter_mut()
            .filter(|e| e.client == c.id && e.label.is_none())
        {
            e.label = Some(label_of(c));
            self.unlabeled.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

pub fn label_of(c: &ClientState) -> Label {
    (c.addr.clone(), c.name.clone().unwrap_or_default())
}

/// SLOWLOG GET's count (10 when not given; -1: all), or its error.
fn get_count(args: Args<'_>) -> Result<usize, CmdError> {
    if args.len() > 3 {
        return Err(CmdError::err_echo(
            "unknown subcommand or wrong number of arguments for '",
            args.get(1),
            "'. Try SLOWLOG HELP.",
        ));
    }
    if args.len() < 3 {
        return Ok(10);
    }
    let n = resp::string2ll(args.get(2))
        .filter(|&n| n >= -1)
        .ok_or(CmdError::err("count should be greater than or equal to -1"))?;
    Ok(if n == -1 { usize::MAX } else { n as usize })
}

/// Visits connections: runs its argument on each (their state and
/// buffers).
pub(crate) type Clients<'a> = dyn FnMut(&mut dyn FnMut(&ClientState, &ClientIo)) + 'a;

/// The ids of the clients `entries` name without their address yet,
/// sorted.
fn unlabeled(entries: &[Entry]) -> Vec<u64> {
    let mut wanted: Vec<u64> = entries
        .iter()
        .filter(|e| e.label.is_none())
        .map(|e| e.client)
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    wanted
}

/// The labels of the clients of `clients` that `wanted` names.
fn labels_in(wanted: &[u64], clients: &mut Clients<'_>) -> Vec<(u64, Label)> {
    let mut found: Vec<(u64, Label)> = Vec::new();
    if !wanted.is_empty() {
        clients(&mut |st, _| {
            if wanted.binary_search(&st.id).is_ok() {
                found.push((st.id, label_of(st)));
            }
        });
    }
    found
}

/// SLOWLOG GET's reply: each entry `[id, unix time, µs, [args], address,
/// name]`, the address and name of an entry without them from `labels`
/// (empty when its client was not found).
fn write_entries(entries: &[Entry], labels: &[(u64, Label)], out: &mut Reply) {
    out.array(entries.len());
    for e in entries {
        out.array(6);
        out.int(e.id as i64);
        out.int(e.time_s as i64);
        out.int(e.duration_us as i64);
        out.array(e.argv.len());
        for a in &e.argv {
            out.bulk(a);
        }
        let label = e.label.as_ref().or_else(|| {
            labels
                .iter()
                .find(|(id, _)| *id == e.client)
                .map(|(_, l)| l)
        });
        match label {
            Some((addr, name)) => {
                out.bulk(addr.as_bytes());
                out.bulk(name);
            }
            None => {
                out.bulk(b"");
                out.bulk(b"");
            }
        }
    }
}

/// SLOWLOG GET [count]: the newest `count` entries (10; -1: all), each
/// `[id, unix time, µs, [args], address, name]`.
pub(crate) fn slowlog_get(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let count = get_count(args)?;
    let entries = c.server.ops.slowlog.newest(count);
    let wanted = unlabeled(&entries);
    Ok(fan_out(
        c.nshards(),
        move |env| labels_in(&wanted, &mut |f| env.clients.for_each(f)),
        move |parts: Vec<Vec<(u64, Label)>>, out: &mut Reply, me: &mut ClientState| {
            let mut labels: Vec<(u64, Label)> = parts.into_iter().flatten().collect();
            labels.push((me.id, label_of(me)));
            write_entries(&entries, &labels, out);
            Ok(())
        },
    ))
}

/// SLOWLOG GET called from a script: the addresses and names of entries
/// without them are looked up among `clients` (the connections of the
/// loops the script's run reaches: every loop when it holds every shard,
/// see `script::run`), as the command looks them up on every thread.
pub(crate) fn get_from_script(
    ops: &crate::ops::Ops,
    args: Args<'_>,
    clients: &mut Clients<'_>,
    out: &mut Reply,
) -> Result<(), CmdError> {
    let count = get_count(args)?;
    let entries = ops.slowlog.newest(count);
    let labels = labels_in(&unlabeled(&entries), clients);
    write_entries(&entries, &labels, out);
    Ok(())
}

pub(crate) fn slowlog_len(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.int(c.server.ops.slowlog.len() as i64);
    Ok(())
}

pub(crate) fn slowlog_reset(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.server.ops.slowlog.reset();
    c.out.ok();
    Ok(())
}

pub(crate) fn slowlog_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(
        c.out,
        "SLOWLOG",
        &[
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use resp::OwnedArgs;

    fn argv(name: &str, a: &[&[u8]]) -> Vec<Vec<u8>> {
        let o = OwnedArgs::from_slices(a);
        argv_of(name, o.args())
            .into_iter()
            .map(|b| b.to_vec())
            .collect()
    }

    #[test]
    fn truncation_as_redis() {
        let long = vec![b'x'; 200];
        let v = argv("set", &[b"set", b"k", &long]);
        assert_eq!(v[2].len(), 128 + "... (72 more bytes)".len());
        assert!(v[2].ends_with(b"... (72 more bytes)"));
        let many: Vec<Vec<u8>> = (0..40).map(|i| i.to_string().into_bytes()).collect();
        let refs: Vec<&[u8]> = many.iter().map(|v| v.as_slice()).collect();
        let v = argv("sadd", &refs);
        assert_eq!(v.len(), 32);
        assert_eq!(v[30], b"30");
        assert_eq!(v[31], b"... (9 more arguments)");
    }

    #[test]
    fn redaction_as_redis() {
        let r = |n: &str, a: &[&[u8]]| argv(n, a);
        assert_eq!(
            r("auth", &[b"auth", b"u", b"p"]),
            vec![
                b"auth".to_vec(),
                b"(redacted)".to_vec(),
                b"(redacted)".to_vec()
            ]
        );
        assert_eq!(
            r(
                "hello",
                &[b"hello", b"3", b"AUTH", b"u", b"p", b"setname", b"n"]
            )[3..],
            [
                b"(redacted)".to_vec(),
                b"(redacted)".to_vec(),
                b"setname".to_vec(),
                b"n".to_vec()
            ]
        );
        assert_eq!(
            r(
                "config|set",
                &[b"config", b"set", b"masterauth", b"x", b"port", b"1"]
            )[3..],
            [b"(redacted)".to_vec(), b"port".to_vec(), b"1".to_vec()]
        );
        assert_eq!(
            r(
                "migrate",
                &[b"migrate", b"h", b"1", b"k", b"0", b"5", b"AUTH2", b"u", b"p"]
            )[7..],
            [b"(redacted)".to_vec(), b"(redacted)".to_vec()]
        );
    }

    #[test]
    fn bounded_newest_first() {
        let log = SlowLog::new(0, 2);
        let o = OwnedArgs::from_slices(&[b"get".as_slice(), b"k"]);
        for us in [5, 6, 7] {
            log.push("get", o.args(), us, 9, None);
        }
        let e = log.newest(10);
        assert_eq!(
            e.iter().map(|e| (e.id, e.duration_us)).collect::<Vec<_>>(),
            [(2, 7), (1, 6)]
        );
        let c = ClientState {
            id: 9,
            addr: "1.2.3.4:5".into(),
            ..Default::default()
        };
        log.forget_client(&c);
        assert!(log
            .newest(10)
            .iter()
            .all(|e| e.label.as_ref().unwrap().0 == "1.2.3.4:5"));
        // A connected client's entries written away from it are labeled
        // at once, with its name of then.
        let log = SlowLog::new(0, 10);
        let mut d = ClientState {
            id: 11,
            addr: "5.6.7.8:9".into(),
            ..Default::default()
        };
        log.connected(&d);
        log.push("get", o.args(), 8, 11, None);
        d.name = Some(b"n".to_vec());
        log.renamed(&d);
        log.push("get", o.args(), 9, 11, None);
        log.forget_client(&d);
        log.push("get", o.args(), 10, 11, None);
        let e = log.newest(3);
        assert_eq!(e[2].label, Some(("5.6.7.8:9".to_string(), Vec::new())));
        assert_eq!(e[1].label, Some(("5.6.7.8:9".to_string(), b"n".to_vec())));
        assert_eq!(e[0].label, None, "gone: found at GET, or empty");
        assert!(log.wants(0));
        log.threshold_us.store(-1, Ordering::Relaxed);
        assert!(!log.wants(1 << 40));
    }
}
