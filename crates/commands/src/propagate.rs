//! What a command that changed the data is logged as (the append-only
//! file), following Redis 7.0's propagation rules: a command is logged in a
//! form whose replay reproduces its effect exactly.
//!
//! * relative expiries become absolute: `EXPIRE`, `PEXPIRE`, `EXPIREAT`,
//!   `GETEX EX|PX|EXAT|PXAT` → `PEXPIREAT key ms`; `SET ... EX|PX|EXAT`,
//!   `SETEX`, `PSETEX` → `SET key value PXAT ms`; an expiry in the past
//!   (the key is gone) → `DEL key`; `GETEX PERSIST` → `PERSIST key`;
//! * `GETDEL` → `DEL key`; `SET ... GET` loses its `GET`;
//! * `GEOADD` → the `zadd key [options] score member ...` it runs as;
//! * random or computed effects are logged as their result: `SPOP` →
//!   `SREM key members` (`DEL key` when the set is gone), `INCRBYFLOAT` →
//!   `SET key value KEEPTTL`, `HINCRBYFLOAT` → `HSET key field value`;
//! * pops that may block log their non-blocking form: `BLPOP`/`BRPOP` →
//!   `LPOP`/`RPOP key`, `BLMOVE` → `LMOVE`, `BRPOPLPUSH` → `RPOPLPUSH`,
//!   `BLMPOP`/`LMPOP` → `LPOP`/`RPOP key count`, `BZPOPMIN`/`BZPOPMAX` →
//!   `ZPOPMIN`/`ZPOPMAX key`, `BZMPOP`/`ZMPOP` → `ZPOPMIN`/`ZPOPMAX key
//!   count`;
//! * `RESTORE key ttl ...` with a relative ttl gets the absolute one and
//!   `ABSTTL`.
//!
//! Everything else is logged as received. Keys deleted by expiry are
//! logged by the engine (`DEL key`, before the command that found them).

use engine::Shard;
use resp::Args;

use crate::table::Resolved;
use crate::util::eq_ic;

/// Called after a shard handler succeeded, with the dirty counter and the
/// implicit-deletion count from before it and the reply it wrote: logs the
/// command if it changed the data.
pub fn after(
    r: Resolved,
    args: Args<'_>,
    db: usize,
    shard: &mut Shard,
    reply: &[u8],
    dirty0: u64,
    implicit0: u64,
) {
    if std::mem::take(&mut shard.prop.own_records) {
        return;
    }
    let changed = shard.dirty() - dirty0;
    let implicit = shard.prop.implicit - implicit0;
    if changed <= implicit {
        return;
    }
    let name = crate::table::registry().full_name(r.id);
    log(name, args, db, shard, reply);
}

fn deadline(shard: &Shard, db: usize, key: &[u8]) -> Option<u64> {
    let d = &shard.dbs[db];
    d.get_with_ttl(key).map(|(_, at)| at)
}

fn log(name: &str, args: Args<'_>, db: usize, shard: &mut Shard, reply: &[u8]) {
    let all: Vec<&[u8]> = args.iter().collect();
    let p = |shard: &mut Shard, v: &[&[u8]]| shard.prop.cmd(db, v);
    match name {
        "set" => {
            let opts = &all[3..];
            let expiry = opts
                .iter()
                .any(|o| eq_ic(o, "ex") || eq_ic(o, "px") || eq_ic(o, "exat"));
            let get = opts.iter().any(|o| eq_ic(o, "get"));
            if !expiry && !get {
                return p(shard, &all);
            }
            match deadline(shard, db, all[1]) {
                None => p(shard, &[b"DEL", all[1]]),
                Some(at) => {
                    let mut v: Vec<&[u8]> = vec![b"SET", all[1], all[2]];
                    let at_s = at.to_string();
                    if at != 0 && (expiry || opts.iter().any(|o| eq_ic(o, "pxat"))) {
                        v.push(b"PXAT");
                        v.push(at_s.as_bytes());
                    }
                    if opts.iter().any(|o| eq_ic(o, "keepttl")) {
                        v.push(b"KEEPTTL");
                    }
                    if opts.iter().any(|o| eq_ic(o, "nx")) {
                        v.push(b"NX");
                    }
                    if opts.iter().any(|o| eq_ic(o, "xx")) {
                        v.push(b"XX");
                    }
                    p(shard, &v)
                }
            }
        }
        "setex" | "psetex" => match deadline(shard, db, all[1]) {
            None => p(shard, &[b"DEL", all[1]]),
            Some(at) => {
                let at = at.to_string();
                p(shard, &[b"SET", all[1], all[3], b"PXAT", at.as_bytes()])
            }
        },
        "expire" | "pexpire" | "expireat" | "pexpireat" => match deadline(shard, db, all[1]) {
            None => p(shard, &[b"DEL", all[1]]),
            Some(at) => {
                let at = at.to_string();
                p(shard, &[b"PEXPIREAT", all[1], at.as_bytes()])
            }
        },
        "getex" => match deadline(shard, db, all[1]) {
            None => p(shard, &[b"DEL", all[1]]),
            Some(0) => p(shard, &[b"PERSIST", all[1]]),
            Some(at) => {
                let at = at.to_string();
                p(shard, &[b"PEXPIREAT", all[1], at.as_bytes()])
            }
        },
        "getdel" => p(shard, &[b"DEL", all[1]]),
        // Redis runs GEOADD as the ZADD it rewrites it to, and logs that.
        "geoadd" => match crate::geo::as_zadd(args) {
            Ok(v) => p(shard, &v.iter().map(Vec::as_slice).collect::<Vec<_>>()),
            Err(_) => p(shard, &all),
        },
        "incrbyfloat" => match parse(reply) {
            Some(Rv::Bulk(v)) => p(shard, &[b"SET", all[1], &v, b"KEEPTTL"]),
            _ => p(shard, &all),
        },
        "hincrbyfloat" => match parse(reply) {
            Some(Rv::Bulk(v)) => p(shard, &[b"HSET", all[1], all[2], &v]),
            _ => p(shard, &all),
        },
        "spop" => {
            if !shard.dbs[db].contains(all[1]) {
                return p(shard, &[b"DEL", all[1]]);
            }
            let members = match parse(reply) {
                Some(Rv::Bulk(m)) => vec![m],
                Some(Rv::Arr(v)) => v.into_iter().filter_map(Rv::bulk).collect(),
                _ => Vec::new(),
            };
            if members.is_empty() {
                return;
            }
            let mut v: Vec<&[u8]> = vec![b"SREM", all[1]];
            v.extend(members.iter().map(Vec::as_slice));
            p(shard, &v)
        }
        "blpop" | "brpop" => {
            let cmd: &[u8] = if name == "blpop" { b"LPOP" } else { b"RPOP" };
            if let Some(Rv::Arr(v)) = parse(reply) {
                if let Some(Rv::Bulk(k)) = v.into_iter().next() {
                    p(shard, &[cmd, &k])
                }
            }
        }
        "blmove" => p(shard, &[b"LMOVE", all[1], all[2], all[3], all[4]]),
        "brpoplpush" => p(shard, &[b"RPOPLPUSH", all[1], all[2]]),
        "blmpop" | "lmpop" | "bzmpop" | "zmpop" => {
            let list = name.ends_with("lmpop");
            let (l, r) = if list {
                ("left", "right")
            } else {
                ("min", "max")
            };
            let first = all.iter().skip(2).find(|a| eq_ic(a, l) || eq_ic(a, r));
            let left = first.is_some_and(|a| eq_ic(a, l));
            let cmd: &[u8] = match (list, left) {
                (true, true) => b"LPOP",
                (true, false) => b"RPOP",
                (false, true) => b"ZPOPMIN",
                (false, false) => b"ZPOPMAX",
            };
            if let Some(Rv::Arr(v)) = parse(reply) {
                let mut it = v.into_iter();
                if let (Some(Rv::Bulk(k)), Some(Rv::Arr(items))) = (it.next(), it.next()) {
                    let n = items.len().to_string();
                    p(shard, &[cmd, &k, n.as_bytes()])
                }
            }
        }
        "bzpopmin" | "bzpopmax" => {
            let cmd: &[u8] = if name == "bzpopmin" {
                b"ZPOPMIN"
            } else {
                b"ZPOPMAX"
            };
            if let Some(Rv::Arr(v)) = parse(reply) {
                if let Some(Rv::Bulk(k)) = v.into_iter().next() {
                    p(shard, &[cmd, &k])
                }
            }
        }
        // A script's commands were logged as they ran; EVAL itself never is.
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {}
        "restore" => {
            let abs = all.iter().skip(4).any(|a| eq_ic(a, "absttl"));
            let ttl = std::str::from_utf8(all[2])
                .ok()
                .and_then(|t| t.parse::<i64>().ok());
            match (abs, ttl) {
                (false, Some(t)) if t > 0 => match deadline(shard, db, all[1]) {
                    Some(at) if at != 0 => {
                        let at = at.to_string();
                        let mut v: Vec<&[u8]> = all.clone();
                        v[2] = at.as_bytes();
                        v.push(b"ABSTTL");
                        p(shard, &v)
                    }
                    _ => p(shard, &all),
                },
                _ => p(shard, &all),
            }
        }
        _ => p(shard, &all),
    }
}

/// A parsed reply, as much as the rewrites need.
#[derive(Debug, PartialEq)]
enum Rv {
    Bulk(Vec<u8>),
    Arr(Vec<Rv>),
    Other,
}

impl Rv {
    fn bulk(self) -> Option<Vec<u8>> {
        match self {
            Rv::Bulk(b) => Some(b),
            _ => None,
        }
    }
}

fn parse(b: &[u8]) -> Option<Rv> {
    let mut pos = 0;
    parse_at(b, &mut pos, 0)
}

fn line<'a>(b: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let start = *pos;
    let end = start + b.get(start..)?.windows(2).position(|w| w == b"\r\n")?;
    *pos = end + 2;
    Some(&b[start..end])
}

fn parse_at(b: &[u8], pos: &mut usize, depth: usize) -> Option<Rv> {
    if depth > 8 {
        return None;
    }
    let kind = *b.get(*pos)?;
    *pos += 1;
    let l = line(b, pos)?;
    let n = || std::str::from_utf8(l).ok()?.parse::<i64>().ok();
    match kind {
        b'$' | b'=' => {
            let len = usize::try_from(n()?).ok()?;
            let data = b.get(*pos..*pos + len)?.to_vec();
            *pos += len + 2;
            if kind == b'=' {
                // Verbatim: "txt:" prefix.
                return Some(Rv::Bulk(data.get(4..)?.to_vec()));
            }
            Some(Rv::Bulk(data))
        }
        b'*' | b'~' | b'>' | b'%' => {
            let Some(len) = n().and_then(|n| usize::try_from(n).ok()) else {
                return Some(Rv::Other);
            };
            let len = if kind == b'%' { len * 2 } else { len };
            let mut v = Vec::with_capacity(len.min(1024));
            for _ in 0..len {
                v.push(parse_at(b, pos, depth + 1)?);
            }
            Some(Rv::Arr(v))
        }
        b',' => Some(Rv::Bulk(l.to_vec())),
        _ => Some(Rv::Other),
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    fn logged(t: &mut TestServer, cmd: &[&str]) -> String {
        for s in &mut t.shards {
            s.prop.on = true;
            s.prop.take();
        }
        t.run(cmd);
        let mut out = String::new();
        for s in &mut t.shards {
            if let Some(c) = s.prop.take() {
                out.push_str(&String::from_utf8_lossy(&c.bytes));
            }
        }
        out.replace("\r\n", " ")
    }

    #[test]
    fn relative_expiries_become_absolute() {
        let mut t = TestServer::new(1);
        let s = logged(&mut t, &["SET", "k", "v", "EX", "100"]);
        let at = t.shards[0].dbs[0].expire_of(b"k");
        assert_eq!(s, format!("*5 $3 SET $1 k $1 v $4 PXAT $13 {at} "));
        let s = logged(&mut t, &["EXPIRE", "k", "50"]);
        let at = t.shards[0].dbs[0].expire_of(b"k");
        assert_eq!(s, format!("*3 $9 PEXPIREAT $1 k $13 {at} "));
        assert_eq!(
            logged(&mut t, &["GETEX", "k", "PERSIST"]),
            "*2 $7 PERSIST $1 k "
        );
        assert_eq!(logged(&mut t, &["EXPIRE", "k", "-1"]), "*2 $3 DEL $1 k ");
        assert_eq!(logged(&mut t, &["EXPIRE", "k", "10"]), "");
        assert_eq!(logged(&mut t, &["SET", "k", "v"]), "*3 $3 SET $1 k $1 v ");
        assert_eq!(logged(&mut t, &["SET", "k", "v", "NX"]), "");
        assert_eq!(logged(&mut t, &["GETDEL", "k"]), "*2 $3 DEL $1 k ");
        assert_eq!(logged(&mut t, &["GET", "k"]), "");
    }

    #[test]
    fn geoadd_is_logged_as_zadd() {
        let mut t = TestServer::new(1);
        // The bytes Redis 7.0.15 writes for the same command.
        assert_eq!(
            logged(
                &mut t,
                &["GEOADD", "g", "13.361389", "38.115556", "Palermo"]
            ),
            "*4 $4 zadd $1 g $16 3479099956230698 $7 Palermo "
        );
        assert_eq!(
            logged(&mut t, &["GEOADD", "g", "xx", "ch", "13", "38", "Palermo"]),
            "*6 $4 zadd $1 g $2 xx $2 ch $16 3479065152021743 $7 Palermo "
        );
        assert_eq!(
            logged(&mut t, &["GEOADD", "g", "nx", "0", "0", "Palermo"]),
            ""
        );
    }

    #[test]
    fn computed_results_are_logged() {
        let mut t = TestServer::new(1);
        assert_eq!(
            logged(&mut t, &["INCRBYFLOAT", "f", "1.5"]),
            "*4 $3 SET $1 f $3 1.5 $7 KEEPTTL "
        );
        assert_eq!(
            logged(&mut t, &["HINCRBYFLOAT", "h", "x", "2.5"]),
            "*4 $4 HSET $1 h $1 x $3 2.5 "
        );
        t.run(&["SADD", "s", "a"]);
        assert_eq!(logged(&mut t, &["SPOP", "s"]), "*2 $3 DEL $1 s ");
        t.run(&["SADD", "s", "a", "b", "c"]);
        let s = logged(&mut t, &["SPOP", "s", "2"]);
        assert!(s.starts_with("*4 $4 SREM $1 s "), "{s}");
        t.run(&["RPUSH", "l", "a", "b", "c"]);
        assert_eq!(logged(&mut t, &["BLPOP", "l", "0"]), "*2 $4 LPOP $1 l ");
        assert_eq!(
            logged(&mut t, &["BLMPOP", "0", "1", "l", "RIGHT", "COUNT", "5"]),
            "*3 $4 RPOP $1 l $1 2 "
        );
        t.run(&["ZADD", "z", "1", "a", "2", "b"]);
        assert_eq!(
            logged(&mut t, &["BZPOPMAX", "z", "0"]),
            "*2 $7 ZPOPMAX $1 z "
        );
    }

    #[test]
    fn lazy_expiry_logs_del_before_the_command() {
        let mut t = TestServer::new(1);
        t.run(&["SET", "k", "v", "PX", "1"]);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(logged(&mut t, &["GET", "k"]), "*2 $3 DEL $1 k ");
        t.run(&["SET", "k", "v", "PX", "1"]);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            logged(&mut t, &["SET", "k", "w"]),
            "*2 $3 DEL $1 k *3 $3 SET $1 k $1 w "
        );
    }
}

thread_local! {
    /// Records made on the home thread (a coordinator's own command, a
    /// scratch run), stamped, waiting for the runtime to attach them to
    /// the coordinator's transaction (see [`take_home`]).
    static HOME: std::cell::RefCell<Vec<(u64, engine::prop::Chunk)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Queues records made on the home thread.
pub fn home_chunk(c: engine::prop::Chunk) {
    let seq = engine::prop::next_seq();
    HOME.with(|h| h.borrow_mut().push((seq, c)));
}

/// The home records queued by the coordinator step that just ran.
pub fn take_home() -> Vec<(u64, engine::prop::Chunk)> {
    HOME.with(|h| std::mem::take(&mut *h.borrow_mut()))
}

/// A coordinated command that writes (MSET, DEL, RENAME, FLUSHALL, SWAPDB
/// ... across shards): logged as received, once, when it finished without
/// an error; its shards' jobs record nothing of their own but keys they
/// found expired.
pub struct Logged {
    inner: Box<dyn crate::coord::Coordinator>,
    args: resp::OwnedArgs,
    db: usize,
    /// It issued jobs (they may have changed data).
    issued: bool,
}

impl Logged {
    /// Wraps `inner` when the append-only file is on and the command
    /// writes; returns it unchanged otherwise.
    pub fn wrap(
        inner: Box<dyn crate::coord::Coordinator>,
        r: Resolved,
        args: Args<'_>,
        db: usize,
    ) -> Box<dyn crate::coord::Coordinator> {
        if !engine::prop::enabled() || !r.spec.has(crate::table::flags::WRITE) {
            return inner;
        }
        // SORT is a write command for its STORE form only; without it,
        // nothing changed and Redis propagates nothing.
        if r.spec.name == "sort" && !args.iter().skip(2).any(|a| crate::util::eq_ic(a, "store")) {
            return inner;
        }
        Box::new(Logged {
            inner,
            args: args.to_owned(),
            db,
            issued: false,
        })
    }
}

impl crate::coord::Coordinator for Logged {
    fn step(
        &mut self,
        results: Vec<crate::coord::JobOut>,
        plan: &mut crate::coord::Plan,
        out: &mut resp::Reply,
        client: &mut crate::ctx::ClientState,
    ) -> Result<(), crate::error::CmdError> {
        let mark = out.len();
        self.inner.step(results, plan, out, client)?;
        self.issued |= !plan.is_empty();
        let reply = &out.as_bytes()[mark..];
        let failed = reply.first() == Some(&b'-');
        if plan.is_empty() && !failed {
            let mut p = engine::prop::PropBuf::default();
            let argv: Vec<&[u8]> = self.args.args().iter().collect();
            p.cmd(self.db, &argv);
            if let Some(c) = p.take() {
                home_chunk(c);
            }
        }
        Ok(())
    }

    fn abort(&mut self, plan: &mut crate::coord::Plan) {
        self.inner.abort(plan)
    }

    /// Once it issued jobs, its record (written at the last step) must
    /// not be lost with its connection.
    fn must_finish(&self) -> bool {
        self.issued || self.inner.must_finish()
    }

    fn first_step_needs_locks(&self) -> bool {
        self.inner.first_step_needs_locks()
    }

    fn parked(&mut self) -> Option<crate::coord::Parked> {
        self.inner.parked()
    }

    fn tx_id(&self) -> Option<crate::tx::TxId> {
        self.inner.tx_id()
    }
}
