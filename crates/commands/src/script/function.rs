//! FUNCTION and FCALL (Redis 7.0 functions): the commands over the library
//! registry (`library`) and the calls into the libraries (`run::fcall`).
//!
//! FUNCTION LOAD, DELETE, FLUSH and RESTORE change the registry: they run
//! as coordinated commands holding every shard's write lock (as FLUSHALL),
//! so that they are ordered with transactions, scripts and each other, and
//! the coordinator layer logs them to the AOF as received when they
//! succeed (Redis propagates them as themselves). Their work happens in
//! the coordinator's step, on the home thread, whose VM compiles the
//! library (a syntax error or a failed registration changes nothing).
//! The other subcommands only read, on the connection's thread.

use std::sync::Arc;

use resp::{Args, Reply};

use super::library::{parse_metadata, Libraries, Library, Registry};
use super::load::create;
use super::vm::{error_text, with_vm};
use crate::coord::{Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ShardCtx};
use crate::error::CmdError;
use crate::ops::Ops;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;

const ACL: &[&str] = &["slow", "scripting"];
const ACL_WRITE: &[&str] = &["write", "slow", "scripting"];
const FCALL_FLAGS: u32 =
    NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS | MOVABLE_KEYS | SCRIPT;

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "fcall",
        -3,
        FCALL_FLAGS,
        NO_KEYS,
        Exec::Shard(fcall, None),
        ACL,
    )
    .with_getkeys(super::eval_keys),
    CommandSpec::new(
        "fcall_ro",
        -3,
        FCALL_FLAGS | READONLY,
        NO_KEYS,
        Exec::Shard(fcall_ro, None),
        ACL,
    )
    .with_getkeys(super::eval_keys),
    CommandSpec::parent("function", -2, 0, &["slow"], SUBCOMMANDS),
];

const SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "delete",
        3,
        NOSCRIPT | WRITE,
        NO_KEYS,
        Exec::Coord(function_delete),
        ACL_WRITE,
    ),
    CommandSpec::new("dump", 2, NOSCRIPT, NO_KEYS, Exec::Conn(function_dump), ACL),
    CommandSpec::new(
        "flush",
        -2,
        NOSCRIPT | WRITE,
        NO_KEYS,
        Exec::Coord(function_flush),
        ACL_WRITE,
    ),
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(function_help),
        ACL,
    ),
    CommandSpec::new(
        "kill",
        2,
        NOSCRIPT | ALLOW_BUSY,
        NO_KEYS,
        Exec::Conn(function_kill),
        ACL,
    ),
    CommandSpec::new(
        "list",
        -2,
        NOSCRIPT,
        NO_KEYS,
        Exec::Conn(function_list),
        ACL,
    ),
    CommandSpec::new(
        "load",
        -3,
        NOSCRIPT | WRITE | DENYOOM,
        NO_KEYS,
        Exec::Coord(function_load),
        ACL_WRITE,
    ),
    CommandSpec::new(
        "restore",
        -3,
        NOSCRIPT | WRITE | DENYOOM,
        NO_KEYS,
        Exec::Coord(function_restore),
        ACL_WRITE,
    ),
    CommandSpec::new(
        "stats",
        2,
        NOSCRIPT | ALLOW_BUSY,
        NO_KEYS,
        Exec::Conn(function_stats),
        ACL,
    ),
];

fn fcall(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    super::run::fcall(ctx, args, false)
}

fn fcall_ro(ctx: &mut ShardCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    super::run::fcall(ctx, args, true)
}

/// Redis's `addReplySubcommandSyntaxError`.
fn subcommand_syntax(args: Args<'_>) -> CmdError {
    CmdError::err_echo(
        "unknown subcommand or wrong number of arguments for '",
        args.get(1),
        "'. Try FUNCTION HELP.",
    )
}

/// A coordinator that does `f` once every shard is locked; the command is
/// propagated as received once it succeeded (Redis propagates FUNCTION
/// LOAD/DELETE/FLUSH/RESTORE as themselves), and counts one change in
/// `rdb_changes_since_last_save` (Redis's `server.dirty++` in each).
fn locked(
    c: &ConnCtx<'_>,
    args: Args<'_>,
    f: impl FnOnce(&mut Reply) -> Result<(), CmdError> + Send + 'static,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let persist = c.server.persist.clone();
    let coord = OneStep::boxed(
        Plan::default(),
        move |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
            f(out)?;
            persist.function_changed();
            Ok(())
        },
    );
    Ok(crate::propagate::as_received(coord, args, c.client.db))
}

/// Compiles `code` on this thread's VM for the server of `ops` into a
/// library (not linked). `existing`: the libraries to check the name
/// against unless `replace`.
fn compile(
    ops: &'static Ops,
    code: &[u8],
    replace: bool,
    existing: &Libraries,
) -> Result<Library, CmdError> {
    let (name, shebang_len) = parse_metadata(code).map_err(CmdError::Err)?;
    if !replace && existing.libs.contains_key(&name) {
        return Err(CmdError::err(format!("Library '{name}' already exists")));
    }
    let lib = with_vm(super::vm::VmKind::Functions, ops, |vm| {
        let r = create(vm, code, name, shebang_len);
        vm.report_memory();
        r
    })
    .map_err(|e| CmdError::err(error_text(&e)))?
    .map_err(CmdError::Err)?;
    Ok(lib)
}

/// Links `lib` into `libs`, replacing the library of its name (checked
/// before) unless one of its functions belongs to another library.
fn link_checked(libs: &mut Libraries, lib: Library) -> Result<String, CmdError> {
    let old = libs.unlink(&lib.name);
    if let Some(f) = libs.collision(&lib) {
        let e = CmdError::err(format!("Function {f} already exists"));
        if let Some(o) = old {
            libs.link(o);
        }
        return Err(e);
    }
    let name = lib.name.clone();
    libs.link(Arc::new(lib));
    Ok(name)
}

/// FUNCTION LOAD [REPLACE] code: the library's name.
fn function_load(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let mut replace = false;
    let mut pos = 2;
    while pos < args.len() - 1 {
        let a = args.get(pos);
        pos += 1;
        if eq_ic(a, "replace") {
            replace = true;
            continue;
        }
        return Err(CmdError::err_echo("Unknown option given: ", a, ""));
    }
    let code = args.get(pos).to_vec();
    let ops = c.server.ops;
    locked(c, args, move |out| {
        let lib = compile(ops, &code, replace, &ops.functions.read())?;
        let name = ops.functions.update(|libs| {
            if !replace && libs.libs.contains_key(&lib.name) {
                return Err(CmdError::err(format!(
                    "Library '{}' already exists",
                    lib.name
                )));
            }
            link_checked(libs, lib)
        })?;
        out.bulk(name.as_bytes());
        Ok(())
    })
}

/// FUNCTION DELETE library-name.
fn function_delete(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let name = args.get(2).to_vec();
    let ops = c.server.ops;
    locked(c, args, move |out| {
        let name = String::from_utf8_lossy(&name).into_owned();
        ops.functions
            .update(|libs| libs.unlink(&name))
            .ok_or_else(|| CmdError::err("Library not found"))?;
        out.ok();
        Ok(())
    })
}

/// FUNCTION FLUSH [ASYNC|SYNC]: deletes every library (both modes free at
/// once: the codes are small next to a keyspace).
fn function_flush(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    match args.len() {
        2 => {}
        3 if eq_ic(args.get(2), "sync") || eq_ic(args.get(2), "async") => {}
        3 => {
            return Err(CmdError::err(
                "FUNCTION FLUSH only supports SYNC|ASYNC option",
            ))
        }
        _ => return Err(subcommand_syntax(args)),
    }
    let ops = c.server.ops;
    locked(c, args, move |out| {
        flush(&ops.functions);
        out.ok();
        Ok(())
    })
}

/// Deletes every library of `registry` (a server's).
pub fn flush(registry: &Registry) {
    let old = registry.update(std::mem::take);
    drop(old);
}

/// How FUNCTION RESTORE treats libraries already there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    Append,
    Replace,
    Flush,
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE].
fn function_restore(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    if args.len() > 4 {
        return Err(subcommand_syntax(args));
    }
    let policy = match args.len() {
        4 => {
            let p = args.get(3);
            if eq_ic(p, "append") {
                Policy::Append
            } else if eq_ic(p, "replace") {
                Policy::Replace
            } else if eq_ic(p, "flush") {
                Policy::Flush
            } else {
                return Err(CmdError::err(
                    "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                ));
            }
        }
        _ => Policy::Append,
    };
    let payload = args.get(2).to_vec();
    let ops = c.server.ops;
    locked(c, args, move |out| {
        restore(ops, &payload, policy)?;
        out.ok();
        Ok(())
    })
}

fn restore(ops: &'static Ops, payload: &[u8], policy: Policy) -> Result<(), CmdError> {
    if engine::rdb::verify_dump_payload(payload).is_err() {
        return Err(CmdError::err("DUMP payload version or checksum are wrong"));
    }
    let codes = engine::rdb::function_payload_codes(payload).map_err(CmdError::Err)?;
    let fresh = load_all(ops, &codes)?;
    ops.functions.update(|libs| {
        if policy == Policy::Flush {
            *libs = fresh;
            return Ok(());
        }
        join(libs, fresh, policy == Policy::Replace)
    })
}

/// Compiles every code into a registry of their own (Redis loads a
/// payload or an RDB file's libraries into a new context first), with
/// Redis's errors for a library or function given twice.
pub fn load_all(ops: &'static Ops, codes: &[Vec<u8>]) -> Result<Libraries, CmdError> {
    let mut fresh = Libraries::default();
    for code in codes {
        let lib = compile(ops, code, false, &fresh)?;
        if let Some(f) = fresh.collision(&lib) {
            return Err(CmdError::err(format!("Function {f} already exists")));
        }
        fresh.link(Arc::new(lib));
    }
    Ok(fresh)
}

/// Redis's `libraryJoin`: all of `src` into `dst`, or nothing.
fn join(dst: &mut Libraries, src: Libraries, replace: bool) -> Result<(), CmdError> {
    let mut next = dst.clone();
    for name in src.libs.keys() {
        if next.libs.contains_key(name) {
            if !replace {
                return Err(CmdError::err(format!("Library {name} already exists")));
            }
            next.unlink(name);
        }
    }
    for lib in src.libs.values() {
        if let Some(f) = next.collision(lib) {
            return Err(CmdError::err(format!("Function {f} already exists")));
        }
    }
    for lib in src.libs.into_values() {
        next.link(lib);
    }
    *dst = next;
    Ok(())
}

/// Installs libraries read from an RDB file (start-up, DEBUG RELOAD, an
/// AOF's RDB preamble), as Redis's `rdbFunctionLoad`: a library already
/// there fails the load unless `replace` (DEBUG RELOAD MERGE, Redis's
/// `RDBFLAGS_ALLOW_DUP`), and so does one that does not compile. They
/// are the server's of `ops`.
pub fn load_from_rdb(ops: &'static Ops, codes: &[Vec<u8>], replace: bool) -> Result<(), String> {
    if codes.is_empty() {
        return Ok(());
    }
    let line = |e: CmdError| {
        let l = String::from_utf8_lossy(&e.line()).into_owned();
        l.strip_prefix("ERR ").map_or(l.clone(), str::to_owned)
    };
    let fresh = load_all(ops, codes).map_err(line)?;
    ops.functions
        .update(|libs| {
            // Redis's `functionsCreateWithLibraryCtx` text (quoted), not
            // `libraryJoin`'s.
            if let Some(name) = fresh
                .libs
                .keys()
                .find(|n| !replace && libs.libs.contains_key(*n))
            {
                return Err(CmdError::err(format!("Library '{name}' already exists")));
            }
            join(libs, fresh, replace)
        })
        .map_err(line)
}

/// FUNCTION DUMP: the payload FUNCTION RESTORE reads.
fn function_dump(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let compress = c
        .server
        .config
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .rdbcompression;
    let libs = c.server.ops.functions.codes();
    let p = engine::rdb::function_dump_payload(libs.iter().map(|l| &l.code[..]), compress);
    c.out.bulk(&p);
    Ok(())
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn function_list(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let (mut with_code, mut pattern) = (false, None);
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        if !with_code && eq_ic(a, "withcode") {
            with_code = true;
        } else if pattern.is_none() && eq_ic(a, "libraryname") {
            if i >= args.len() - 1 {
                return Err(CmdError::err("library name argument was not given"));
            }
            i += 1;
            pattern = Some(args.get(i));
        } else {
            return Err(CmdError::err_echo("Unknown argument ", a, ""));
        }
        i += 1;
    }
    let reg = c.server.ops.functions.read();
    let libs: Vec<&Arc<Library>> = reg
        .libs
        .values()
        .filter(|l| pattern.is_none_or(|p| ds::glob::glob_match(p, l.name.as_bytes(), true)))
        .collect();
    let out = &mut *c.out;
    out.array(libs.len());
    for l in libs {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(l.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array(l.functions.len());
        for f in &l.functions {
            out.map(3);
            out.bulk(b"name");
            out.bulk(f.name.as_bytes());
            out.bulk(b"description");
            out.optional_bulk(f.description.as_deref());
            out.bulk(b"flags");
            let names = flag_names(&f.flags);
            out.set(names.len());
            for n in names {
                out.simple(n);
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&l.code);
        }
    }
    Ok(())
}

/// A function's flags by name, in Redis's order.
fn flag_names(f: &super::shebang::ScriptFlags) -> Vec<&'static str> {
    [
        (f.no_writes, "no-writes"),
        (f.allow_oom, "allow-oom"),
        (f.allow_stale, "allow-stale"),
        (f.no_cluster, "no-cluster"),
        (f.allow_cross_slot_keys, "allow-cross-slot-keys"),
    ]
    .into_iter()
    .filter_map(|(on, n)| on.then_some(n))
    .collect()
}

/// FUNCTION STATS: the running function (if one is busy) and the engine's
/// counts.
fn function_stats(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let running = c.server.ops.busy.running_function()?;
    let (nlibs, nfuncs) = {
        let reg = c.server.ops.functions.read();
        (reg.libs.len(), reg.function_count())
    };
    let out = &mut *c.out;
    out.map(2);
    out.bulk(b"running_script");
    match running {
        None => out.null(),
        Some((name, command, ms)) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(name.as_bytes());
            out.bulk(b"command");
            out.array(command.len());
            for a in &command {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.int(ms as i64);
        }
    }
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(nlibs as i64);
    out.bulk(b"functions_count");
    out.int(nfuncs as i64);
    Ok(())
}

/// FUNCTION KILL: see `busy::Registry::kill`.
fn function_kill(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.server.ops.busy.kill(false)?;
    c.out.ok();
    Ok(())
}

const HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

fn function_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(HELP.len());
    for l in HELP {
        c.out.simple(l);
    }
    Ok(())
}
