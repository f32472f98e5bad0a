//! RENAME, RENAMENX, COPY and MOVE: the commands that move or copy a whole
//! entry (value, TTL and, for RENAME, access time) to another key or
//! database. When both keys share a shard one shard handler does it; when
//! they do not, a step-by-step coordinator takes (or reads) the source on
//! its shard, then stores it on the destination's ([`RenameCoord`],
//! [`CopyCoord`]).

use ds::events as ev;
use engine::lazyfree::Del;
use engine::{OwnedEntry, Shard, Value};
use resp::{Args, Reply};

use crate::coord::{outputs, Coordinator, JobOut, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::propagate::as_received;
use crate::table::shard_of;
use crate::util::eq_ic;

use super::parse_db;

/// RENAME key newkey: +OK; `ERR no such key` when the source is missing
/// (also for RENAME a a). The destination is overwritten; the source's
/// deadline moves with it.
pub(super) fn rename(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    rename_local(ctx, args, false)
}

/// RENAMENX key newkey: 1 if renamed, 0 if the destination exists (or is
/// the source itself); `ERR no such key` when the source is missing.
pub(super) fn renamenx(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    rename_local(ctx, args, true)
}

/// Redis's `renameGenericCommand`, both keys on this shard.
fn rename_local(ctx: &mut ShardCtx<'_>, args: Args<'_>, nx: bool) -> Result<(), CmdError> {
    let (db, src, dst) = (ctx.db, args.get(1), args.get(2));
    if ctx.shard.lookup_write(db, src).is_none() {
        return Err(CmdError::NoSuchKey);
    }
    if src == dst {
        // Redis: RENAME a a is +OK, RENAMENX a a is 0.
        rename_reply(ctx.out, nx, false);
        return Ok(());
    }
    if nx && ctx.shard.lookup_write(db, dst).is_some() {
        rename_reply(ctx.out, nx, false);
        return Ok(());
    }
    // INVARIANT: looked up (and not expired) just above.
    let (entry, at) = ctx.shard.dbs[db]
        .remove_with_ttl(src)
        .expect("INVARIANT: source present");
    ctx.shard.delete(db, dst, Del::Server);
    ctx.shard.dbs[db].insert(dst, entry, at);
    ctx.propagate_as_is(args);
    ctx.notify(ev::GENERIC, "rename_from", src);
    ctx.notify(ev::GENERIC, "rename_to", dst);
    rename_reply(ctx.out, nx, true);
    Ok(())
}

/// RENAME replies +OK; RENAMENX replies 1 if it renamed, 0 if not (and 0
/// for RENAMENX a a).
fn rename_reply(out: &mut Reply, nx: bool, renamed: bool) {
    match (nx, renamed) {
        (false, _) => out.ok(),
        (true, renamed) => out.int(renamed as i64),
    }
}

pub(super) fn rename_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(RenameCoord::boxed(c, args, false), args, db))
}

pub(super) fn renamenx_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    Ok(as_received(RenameCoord::boxed(c, args, true), args, db))
}

/// RENAME/RENAMENX with the keys on different shards.
///
/// Steps (RENAME skips the first):
/// 1. RENAMENX only: does the destination exist on its shard?
/// 2. On the source's shard: take the source entry out (value, deadline,
///    access time). If the destination exists (RENAMENX), only check that
///    the source exists, to choose between `ERR no such key` and 0.
/// 3. On the destination's shard: store the entry (RENAME replaces what is
///    there). RENAMENX stores only if the destination is still absent and
///    otherwise hands the entry back, because another client may have
///    created it between steps 1 and 3 (no isolation in this layer yet).
/// 4. RENAMENX lost that race only: put the entry back at the source.
struct RenameCoord {
    nx: bool,
    db: usize,
    src: Vec<u8>,
    dst: Vec<u8>,
    src_shard: usize,
    dst_shard: usize,
    stage: RenameStage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RenameStage {
    Start,
    CheckedDst,
    TookSrc,
    Stored,
    Restored,
}

impl RenameCoord {
    fn boxed(c: &mut ConnCtx<'_>, args: Args<'_>, nx: bool) -> Box<dyn Coordinator> {
        let n = c.nshards();
        Box::new(RenameCoord {
            nx,
            db: c.client.db,
            src: args.get(1).to_vec(),
            dst: args.get(2).to_vec(),
            src_shard: shard_of(args.get(1), n),
            dst_shard: shard_of(args.get(2), n),
            stage: RenameStage::Start,
        })
    }

    /// Step 2's job: take the source out (`Some`), or report whether it
    /// exists when the destination is already taken.
    fn take_src(&self, plan: &mut Plan, dst_exists: bool) {
        let (db, src) = (self.db, self.src.clone());
        plan.run(
            self.src_shard,
            move |env| -> Result<(OwnedEntry, u64), bool> {
                if env.shard.lookup_write(db, &src).is_none() {
                    return Err(false);
                }
                if dst_exists {
                    return Err(true);
                }
                // INVARIANT: looked up (and not expired) just above.
                let taken = env.shard.dbs[db]
                    .remove_with_ttl(&src)
                    .expect("INVARIANT: source present");
                // Each half of a cross-shard rename is emitted by the
                // shard that owns its key: `rename_from` here, `rename_to`
                // with the store (their relative order is not kept).
                env.shard.notify(db, ev::GENERIC, "rename_from", &src);
                Ok(taken)
            },
        );
    }
}

impl Coordinator for RenameCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        let db = self.db;
        match self.stage {
            RenameStage::Start if self.nx => {
                let dst = self.dst.clone();
                plan.run(self.dst_shard, move |env| env.shard.exists(db, &dst));
                self.stage = RenameStage::CheckedDst;
            }
            RenameStage::Start => {
                self.take_src(plan, false);
                self.stage = RenameStage::TookSrc;
            }
            RenameStage::CheckedDst => {
                let dst_exists = outputs::<bool>(results).pop().unwrap_or(false);
                self.take_src(plan, dst_exists);
                self.stage = RenameStage::TookSrc;
            }
            RenameStage::TookSrc => {
                let taken = outputs::<Result<(OwnedEntry, u64), bool>>(results).pop();
                let entry = match taken {
                    Some(Ok(e)) => e,
                    Some(Err(true)) => {
                        out.int(0);
                        return Ok(());
                    }
                    _ => return Err(CmdError::NoSuchKey),
                };
                let (dst, nx) = (self.dst.clone(), self.nx);
                plan.run(self.dst_shard, move |env| -> Option<(OwnedEntry, u64)> {
                    if nx {
                        if env.shard.exists(db, &dst) {
                            return Some(entry);
                        }
                    } else {
                        env.shard.delete(db, &dst, Del::Server);
                    }
                    let (e, at) = entry;
                    env.shard.dbs[db].insert(&dst, e, at);
                    env.shard.notify(db, ev::GENERIC, "rename_to", &dst);
                    None
                });
                // RENAME's store cannot bounce: locks release with it.
                plan.last = !nx;
                self.stage = RenameStage::Stored;
            }
            RenameStage::Stored => match outputs::<Option<(OwnedEntry, u64)>>(results)
                .pop()
                .flatten()
            {
                None => rename_reply(out, self.nx, true),
                Some((entry, at)) => {
                    let src = self.src.clone();
                    plan.run(self.src_shard, move |env| {
                        if !env.shard.exists(db, &src) {
                            env.shard.dbs[db].insert(&src, entry, at);
                        }
                    });
                    self.stage = RenameStage::Restored;
                }
            },
            RenameStage::Restored => out.int(0),
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// COPY MOVE
// ---------------------------------------------------------------------------

/// Parsed COPY options.
struct CopyOpts {
    dst_db: usize,
    replace: bool,
}

/// COPY source destination [DB destination-db] [REPLACE]: syntax, as
/// Redis's `copyCommand` checks it (a bad DB index is reported as soon as
/// it is read), then the same-object check.
fn parse_copy(args: Args<'_>, db: usize, databases: usize) -> Result<CopyOpts, CmdError> {
    let mut o = CopyOpts {
        dst_db: db,
        replace: false,
    };
    let mut j = 3;
    while j < args.len() {
        let a = args.get(j);
        if eq_ic(a, "replace") {
            o.replace = true;
        } else if eq_ic(a, "db") && j + 1 < args.len() {
            o.dst_db = parse_db(args.get(j + 1), databases)?;
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if o.dst_db == db && args.get(1) == args.get(2) {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    Ok(o)
}

/// COPY: 1 if copied, 0 if the source is missing or the destination exists
/// without REPLACE. The copy keeps the source's deadline.
pub(super) fn copy(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let o = parse_copy(args, ctx.db, ctx.databases)?;
    let touch = ctx.touch();
    let Some(e) = ctx.shard.lookup_read(ctx.db, args.get(1), touch) else {
        ctx.out.int(0);
        return Ok(());
    };
    let value = e.value().to_owned_value();
    let at = ctx.shard.dbs[ctx.db].expire_of(args.get(1));
    let copied = copy_store(ctx.shard, o.dst_db, args.get(2), value, at, o.replace);
    if copied {
        ctx.propagate_as_is(args);
    }
    ctx.out.int(copied as i64);
    Ok(())
}

/// Stores a copy unless the destination exists and `replace` is false.
/// The copy is a new key: Redis deletes a replaced destination before
/// adding the copy, so it starts a fresh LFU counter rather than inheriting
/// the destination's (as an overwrite by `store` would).
fn copy_store(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    value: Value,
    at: u64,
    replace: bool,
) -> bool {
    if !replace && shard.exists(db, key) {
        return false;
    }
    if replace {
        shard.delete(db, key, Del::Server);
    }
    shard.store(db, key, value, at);
    shard.notify(db, ev::GENERIC, "copy_to", key);
    true
}

/// COPY with the keys on different shards: read the source (value and
/// deadline) on its shard, then store a copy on the destination's shard.
pub(super) fn copy_multi(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let db = c.client.db;
    let o = parse_copy(args, db, c.server.databases())?;
    let n = c.nshards();
    let touch = !c.client.no_touch;
    let src = args.get(1).to_vec();
    let mut first = Plan::default();
    first.run(shard_of(&src, n), move |env| {
        let value = env
            .shard
            .lookup_read(db, &src, touch)?
            .value()
            .to_owned_value();
        Some((value, env.shard.dbs[db].expire_of(&src)))
    });
    let coord = Box::new(CopyCoord {
        first: Some(first),
        dst: args.get(2).to_vec(),
        dst_shard: shard_of(args.get(2), n),
        opts: o,
        stored: false,
    });
    Ok(as_received(coord, args, db))
}

/// COPY with the keys on different shards, both held by the caller, which
/// reaches each by `on` (a script holding every shard, `script::run`): as
/// [`copy_multi`], by calls instead of jobs. Whether it copied; nothing
/// is propagated (the caller records the command as received).
pub(crate) fn copy_across(
    args: Args<'_>,
    db: usize,
    databases: usize,
    touch: bool,
    nshards: usize,
    on: &mut crate::scratch::OnShard<'_>,
) -> Result<bool, CmdError> {
    let o = parse_copy(args, db, databases)?;
    let (src, dst) = (args.get(1), args.get(2));
    let mut got = None;
    on(shard_of(src, nshards), &mut |sh| {
        got = sh
            .lookup_read(db, src, touch)
            .map(|e| e.value().to_owned_value())
            .map(|v| (v, sh.dbs[db].expire_of(src)));
    });
    let Some((value, at)) = got else {
        return Ok(false);
    };
    let (mut value, mut copied) = (Some(value), false);
    on(shard_of(dst, nshards), &mut |sh| {
        if let Some(v) = value.take() {
            copied = copy_store(sh, o.dst_db, dst, v, at, o.replace);
        }
    });
    Ok(copied)
}

/// Steps of a cross-shard COPY: the source's read (issued at build time),
/// then the store on the destination's shard, then the reply.
struct CopyCoord {
    first: Option<Plan>,
    dst: Vec<u8>,
    dst_shard: usize,
    opts: CopyOpts,
    stored: bool,
}

impl Coordinator for CopyCoord {
    fn step(
        &mut self,
        results: Vec<JobOut>,
        plan: &mut Plan,
        out: &mut Reply,
        _client: &mut ClientState,
    ) -> Result<(), CmdError> {
        if let Some(p) = self.first.take() {
            *plan = p;
            return Ok(());
        }
        if self.stored {
            let copied = outputs::<bool>(results).pop().unwrap_or(false);
            out.int(copied as i64);
            return Ok(());
        }
        let Some((value, at)) = outputs::<Option<(Value, u64)>>(results).pop().flatten() else {
            out.int(0);
            return Ok(());
        };
        let (dst, db, replace) = (self.dst.clone(), self.opts.dst_db, self.opts.replace);
        plan.run(self.dst_shard, move |env| {
            copy_store(env.shard, db, &dst, value, at, replace)
        });
        plan.last = true;
        self.stored = true;
        Ok(())
    }
}

/// MOVE key db: 1 if moved, 0 if the key is missing here or exists there.
pub(super) fn move_(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let dst_db = parse_db(args.get(2), ctx.databases)?;
    let (db, key) = (ctx.db, args.get(1));
    if dst_db == db {
        return Err(CmdError::err("source and destination objects are the same"));
    }
    if ctx.shard.lookup_write(db, key).is_none() || ctx.shard.lookup_write(dst_db, key).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    // INVARIANT: looked up (and not expired) just above.
    let (entry, at) = ctx.shard.dbs[db]
        .remove_with_ttl(key)
        .expect("INVARIANT: key present");
    ctx.shard.dbs[dst_db].insert(key, entry, at);
    ctx.propagate_as_is(args);
    ctx.shard.notify(db, ev::GENERIC, "move_from", key);
    ctx.shard.notify(dst_db, ev::GENERIC, "move_to", key);
    ctx.out.int(1);
    Ok(())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::keys::tests::*;
    use crate::testutil::TestServer;

    #[test]
    fn rename_and_renamenx() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            let (a, b) = (a.as_str(), b.as_str());
            assert_eq!(t.run(&["RENAME", a, b]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAMENX", a, b]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAME", a, a]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAMENX", a, a]), "-ERR no such key\r\n");
            t.run(&["SET", a, "1"]);
            assert_eq!(t.run(&["RENAME", a, a]), "+OK\r\n");
            assert_eq!(t.run(&["RENAMENX", a, a]), ":0\r\n");
            assert_eq!(t.run(&["GET", a]), "$1\r\n1\r\n");
            // Source missing is an error even when the destination exists.
            t.run(&["SET", b, "2"]);
            assert_eq!(t.run(&["RENAMENX", "nope", b]), "-ERR no such key\r\n");
            assert_eq!(t.run(&["RENAMENX", a, b]), ":0\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n2\r\n");
            assert_eq!(t.run(&["GET", a]), "$1\r\n1\r\n");
            // The deadline moves with the value; the old one is replaced.
            let at = (now_ms() + 100_000).to_string();
            t.run(&["PEXPIREAT", a, &at]);
            assert_eq!(t.run(&["RENAME", a, b]), "+OK\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n1\r\n");
            assert_eq!(t.run(&["EXISTS", a]), ":0\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", b]), format!(":{at}\r\n"));
            assert_eq!(t.run(&["RENAMENX", b, a]), ":1\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", a]), format!(":{at}\r\n"));
            assert_eq!(t.run(&["EXISTS", b]), ":0\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
            // A destination without TTL replaced by a source without TTL.
            t.run(&["PERSIST", a]);
            t.run(&["SET", b, "x"]);
            t.run(&["EXPIRE", b, "100"]);
            assert_eq!(t.run(&["RENAME", a, b]), "+OK\r\n");
            assert_eq!(t.run(&["TTL", b]), ":-1\r\n");
            // An expired source does not exist.
            t.run(&["SET", a, "v"]);
            expire_now(&mut t, 0, a);
            assert_eq!(t.run(&["RENAME", a, b]), "-ERR no such key\r\n");
            // An expired destination does not block RENAMENX.
            t.run(&["SET", a, "v"]);
            expire_now(&mut t, 0, b);
            assert_eq!(t.run(&["RENAMENX", a, b]), ":1\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\nv\r\n");
            // Other databases are untouched.
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["RENAME", b, a]), "-ERR no such key\r\n");
            t.run(&["SELECT", "0"]);
            assert_eq!(
                t.run(&["RENAME", a]),
                "-ERR wrong number of arguments for 'rename' command\r\n"
            );
        }
    }

    #[test]
    fn rename_keeps_encoding_and_access_time() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            t.run(&["SET", &a, "12345"]);
            let s = shard_of(a.as_bytes(), n);
            t.shards[s].dbs[0].get_mut(a.as_bytes()).unwrap().access_s -= 1000;
            t.run(&["RENAME", &a, &b]);
            assert_eq!(t.run(&["OBJECT", "ENCODING", &b]), "$3\r\nint\r\n");
            // RENAME looks the source up for writing, which touches it.
            assert_eq!(t.run(&["OBJECT", "IDLETIME", &b]), ":0\r\n");
        }
    }

    #[test]
    fn copy_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            let (a, b) = (a.as_str(), b.as_str());
            assert_eq!(t.run(&["COPY", a, b]), ":0\r\n");
            t.run(&["SET", a, "1"]);
            let at = (now_ms() + 100_000).to_string();
            t.run(&["PEXPIREAT", a, &at]);
            assert_eq!(t.run(&["COPY", a, b]), ":1\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n1\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", b]), format!(":{at}\r\n"));
            assert_eq!(t.run(&["PEXPIRETIME", a]), format!(":{at}\r\n"));
            t.run(&["SET", a, "2"]);
            assert_eq!(t.run(&["COPY", a, b]), ":0\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n1\r\n");
            assert_eq!(t.run(&["COPY", a, b, "REPLACE"]), ":1\r\n");
            assert_eq!(t.run(&["GET", b]), "$1\r\n2\r\n");
            assert_eq!(t.run(&["TTL", b]), ":-1\r\n");
            // Into another database, same name allowed there.
            assert_eq!(t.run(&["COPY", a, a, "DB", "1"]), ":1\r\n");
            assert_eq!(t.run(&["COPY", a, b, "db", "1"]), ":1\r\n");
            assert_eq!(t.run(&["COPY", a, b, "db", "1"]), ":0\r\n");
            assert_eq!(
                t.run(&["COPY", a, b, "replace", "replace", "db", "2", "db", "1"]),
                ":1\r\n"
            );
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["MGET", a, b]), "*2\r\n$1\r\n2\r\n$1\r\n2\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":2\r\n");
            t.run(&["SELECT", "2"]);
            assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
            t.run(&["SELECT", "0"]);
            // An expired source is missing; an expired destination is free.
            expire_now(&mut t, 0, b);
            assert_eq!(t.run(&["COPY", a, b]), ":1\r\n");
            expire_now(&mut t, 0, a);
            assert_eq!(t.run(&["COPY", a, b, "REPLACE"]), ":0\r\n");
        }
    }

    #[test]
    fn copy_errors() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let (a, b) = apart(n);
            let (a, b) = (a.as_str(), b.as_str());
            t.run(&["SET", a, "1"]);
            let same = "-ERR source and destination objects are the same\r\n";
            assert_eq!(t.run(&["COPY", a, a]), same);
            assert_eq!(t.run(&["COPY", a, a, "db", "0"]), same);
            let range = "-ERR DB index is out of range\r\n";
            assert_eq!(t.run(&["COPY", a, b, "db", "16"]), range);
            assert_eq!(t.run(&["COPY", a, b, "db", "-1"]), range);
            assert_eq!(t.run(&["COPY", "nokey", b, "db", "16"]), range);
            // The bad index is reported before a later syntax error.
            assert_eq!(t.run(&["COPY", a, b, "db", "16", "foo"]), range);
            assert_eq!(
                t.run(&["COPY", a, b, "db", "99999999999"]),
                "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"
            );
            assert_eq!(
                t.run(&["COPY", a, b, "db", "1.5"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(t.run(&["COPY", a, b, "db"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["COPY", a, b, "foo"]), "-ERR syntax error\r\n");
            assert_eq!(
                t.run(&["COPY", a]),
                "-ERR wrong number of arguments for 'copy' command\r\n"
            );
            assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
        }
    }

    #[test]
    fn move_command() {
        for n in SHARD_COUNTS {
            let mut t = TestServer::new(n);
            let same = "-ERR source and destination objects are the same\r\n";
            assert_eq!(t.run(&["MOVE", "k", "0"]), same);
            assert_eq!(
                t.run(&["MOVE", "k", "16"]),
                "-ERR DB index is out of range\r\n"
            );
            assert_eq!(
                t.run(&["MOVE", "k", "-1"]),
                "-ERR DB index is out of range\r\n"
            );
            assert_eq!(
                t.run(&["MOVE", "k", "abc"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(
                t.run(&["MOVE", "k", "99999999999"]),
                "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"
            );
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":0\r\n");
            t.run(&["SET", "k", "v"]);
            let at = (now_ms() + 100_000).to_string();
            t.run(&["PEXPIREAT", "k", &at]);
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":1\r\n");
            assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
            assert_eq!(t.run(&["PEXPIRETIME", "k"]), format!(":{at}\r\n"));
            t.run(&["SELECT", "0"]);
            t.run(&["SET", "k", "other"]);
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":0\r\n");
            assert_eq!(t.run(&["GET", "k"]), "$5\r\nother\r\n");
            // An expired key in the target database does not block.
            expire_now(&mut t, 1, "k");
            assert_eq!(t.run(&["MOVE", "k", "1"]), ":1\r\n");
            t.run(&["SELECT", "1"]);
            assert_eq!(t.run(&["GET", "k"]), "$5\r\nother\r\n");
        }
    }
}
