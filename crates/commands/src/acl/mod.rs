//! ACL: users, their permissions, and the ACL command (Redis 7.0).
//!
//! * [`rules`]: one user's rules and ACL SETUSER's modifiers;
//! * [`users`]: the registry every thread shares (`ServerShared::acl`),
//!   user handles clients hold, the ACL log and the ACL file;
//! * [`check`] / [`keyspec`]: whether a user may run one call;
//! * [`cats`]: categories as bits, computed once with the registry.
//!
//! Where checks happen: once per command in `admit` (after
//! NOAUTH, Redis's processCommand order), again for each queued command at
//! EXEC (rules may have changed since it was queued), and for each
//! `redis.call` of a script, against the user who ran it. Dispatch tests
//! only [`users::User::unrestricted`] for a user who may run anything (the
//! default user unless restricted): one relaxed load and a branch.
//!
//! ACL SETUSER that takes channel permissions away disconnects the user's
//! pub/sub clients whose subscriptions are no longer allowed, on every
//! thread before it replies (Redis's `ACLKillPubsubClientsIfNeeded`).

pub mod cats;
pub mod check;
pub mod keyspec;
pub mod rules;
pub mod sha256;
pub mod users;

use std::sync::Arc;

use resp::{Args, OwnedArgs, Reply};

use crate::coord::{fan_out, ClientIo, Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ServerShared};
use crate::error::CmdError;
use crate::table::{flags::*, registry, CommandSpec, Exec, Resolved, NO_KEYS};
use crate::util::eq_ic;

pub use check::Denied;
pub use users::{Acl, ClientAcl, Context, LogEntry, Reason, Revoked, User};

const FLAGS: u32 = NOSCRIPT | LOADING | STALE;
const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];
const SLOW: &[&str] = &["slow"];

const fn sub(name: &'static str, arity: i32, flags: u32, exec: Exec) -> CommandSpec {
    let acl = if flags & ADMIN != 0 { ADMIN_ACL } else { SLOW };
    CommandSpec::new(name, arity, flags, NO_KEYS, exec, acl)
}

pub(crate) const COMMANDS: &[CommandSpec] = &[CommandSpec::parent("acl", -2, 0, SLOW, SUBCOMMANDS)];

const SUBCOMMANDS: &[CommandSpec] = &[
    sub("cat", -2, FLAGS, Exec::Conn(cat)),
    sub("deluser", -3, ADMIN | FLAGS, Exec::Coord(deluser)),
    sub("dryrun", -4, ADMIN | FLAGS, Exec::Conn(dryrun)),
    sub("genpass", -2, FLAGS, Exec::Conn(genpass)),
    sub("getuser", 3, ADMIN | FLAGS, Exec::Conn(getuser)),
    sub("help", 2, LOADING | STALE, Exec::Conn(help)),
    sub("list", 2, ADMIN | FLAGS, Exec::Conn(list)),
    sub("load", 2, ADMIN | FLAGS, Exec::Coord(load)),
    sub("log", -2, ADMIN | FLAGS, Exec::Conn(log)),
    sub("save", 2, ADMIN | FLAGS, Exec::Conn(save)),
    sub("setuser", -3, ADMIN | FLAGS, Exec::Coord(setuser)),
    sub("users", 2, ADMIN | FLAGS, Exec::Conn(users)),
    sub("whoami", 2, FLAGS, Exec::Conn(whoami)),
];

/// `acl-pubsub-default allchannels`.
fn pubsub_all(server: &ServerShared) -> bool {
    server
        .config
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .acl_pubsub_default_all
}

/// `aclfile` as configured, and `dir` (where a relative one lives).
fn aclfile(server: &ServerShared) -> Option<(String, Option<std::path::PathBuf>)> {
    let cfg = server.config.read().unwrap_or_else(|e| e.into_inner());
    let path = cfg.aclfile.as_ref()?.display().to_string();
    Some((path, cfg.dir.clone()))
}

fn wrong_args(args: Args<'_>) -> CmdError {
    CmdError::err_echo(
        "unknown subcommand or wrong number of arguments for '",
        args.get(1),
        "'. Try ACL HELP.",
    )
}

/// ACL SETUSER name [rule ...]: +OK, or Redis's error naming the bad
/// modifier; nothing changes on error. Channel permissions taken away
/// disconnect the user's pub/sub clients that lose a subscription.
fn setuser(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let ops: Vec<&[u8]> = (3..args.len()).map(|i| args.get(i)).collect();
    let revoked = c
        .server
        .acl
        .set_user(args.get(2), &ops, pubsub_all(c.server))
        .map_err(|e| {
            let mut line = b"ERR ".to_vec();
            line.extend_from_slice(&e);
            CmdError::Bytes(line)
        })?;
    let Some(revoked) = revoked else {
        return Ok(OneStep::boxed(
            Plan::default(),
            |_: Vec<()>, out: &mut Reply, _: &mut ClientState| {
                out.ok();
                Ok(())
            },
        ));
    };
    let revoked = Arc::new(revoked);
    let job_revoked = revoked.clone();
    let me = c.client.id;
    let default = c.server.acl.default_user();
    // A client that never authenticated runs as the default user.
    let is_default = Arc::ptr_eq(&revoked.user, &default);
    let loses = move |st: &ClientState, r: &Revoked| {
        let of_user = match &st.acl.user {
            Some(u) => Arc::ptr_eq(u, &r.user),
            None => is_default,
        };
        of_user && st.subs.as_ref().is_some_and(|s| r.kills(s))
    };
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let mut victims = Vec::new();
            env.clients.for_each(&mut |st, _| {
                if st.id != me && loses(st, &job_revoked) {
                    victims.push(st.id);
                }
            });
            for id in victims {
                env.clients.kill(id);
            }
        },
        move |_: Vec<()>, out: &mut Reply, client: &mut ClientState| {
            // The caller itself (a RESP3 subscriber): closed after its reply.
            if loses(client, &revoked) {
                client.close_after_reply = true;
            }
            out.ok();
            Ok(())
        },
    ))
}

/// ACL GETUSER name: the user's flags, passwords, root permissions and
/// selectors as a map; a null for an unknown user (Redis 7.0).
fn getuser(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let Some(u) = c.server.acl.get(args.get(2)) else {
        c.out.null();
        return Ok(());
    };
    let r = u.rules();
    let out = &mut *c.out;
    out.map(6);
    out.bulk(b"flags");
    let names = r.flag_names();
    out.set(names.len());
    for n in names {
        out.bulk(n.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(r.passwords.len());
    for p in &r.passwords {
        out.bulk(p.as_bytes());
    }
    let describe = |out: &mut Reply, s: &rules::Selector| {
        out.bulk(b"commands");
        out.bulk(&s.describe_commands());
        out.bulk(b"keys");
        out.bulk(&s.keys_text());
        out.bulk(b"channels");
        out.bulk(&s.channels_text());
    };
    describe(out, &r.selectors[0]);
    out.bulk(b"selectors");
    out.array(r.selectors.len() - 1);
    for s in &r.selectors[1..] {
        out.map(3);
        describe(out, s);
    }
    Ok(())
}

/// Closes the connections of `gone` users on every thread; the caller
/// closes after its reply if it is one of them.
fn disconnect(
    nshards: usize,
    me: u64,
    gone: Vec<Arc<User>>,
    reply: impl FnOnce(&mut Reply) + Send + 'static,
) -> Box<dyn Coordinator> {
    let gone = Arc::new(gone);
    let job_gone = gone.clone();
    fan_out(
        nshards,
        move |env| {
            let mut victims = Vec::new();
            env.clients.for_each(&mut |st, _| {
                let of = |u: &Arc<User>| st.acl.user.as_ref().is_some_and(|m| Arc::ptr_eq(m, u));
                if st.id != me && job_gone.iter().any(of) {
                    victims.push(st.id);
                }
            });
            for id in victims {
                env.clients.kill(id);
            }
        },
        move |_: Vec<()>, out: &mut Reply, client: &mut ClientState| {
            let mine = client
                .acl
                .user
                .as_ref()
                .is_some_and(|m| gone.iter().any(|u| Arc::ptr_eq(m, u)));
            if mine {
                client.authenticated = false;
                client.close_after_reply = true;
            }
            reply(out);
            Ok(())
        },
    )
}

/// ACL DELUSER name [name ...]: the number of users deleted; their
/// connections are closed. The default user cannot be deleted.
fn deluser(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let names: Vec<&[u8]> = (2..args.len()).map(|i| args.get(i)).collect();
    if names.iter().any(|n| *n == b"default") {
        return Err(CmdError::err("The 'default' user cannot be removed"));
    }
    let gone = c.server.acl.delete(&names);
    let n = gone.len() as i64;
    Ok(disconnect(c.nshards(), c.client.id, gone, move |out| {
        out.int(n)
    }))
}

/// ACL LIST / ACL USERS: every user, in name order.
fn list(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let all = c.server.acl.all();
    c.out.array(all.len());
    for u in all {
        let mut line = b"user ".to_vec();
        line.extend_from_slice(&u.name);
        line.push(b' ');
        line.extend_from_slice(&u.rules().describe());
        c.out.bulk(&line);
    }
    Ok(())
}

fn users(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let all = c.server.acl.all();
    c.out.array(all.len());
    for u in all {
        c.out.bulk(&u.name);
    }
    Ok(())
}

fn whoami(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.bulk(c.client.acl.name());
    Ok(())
}

/// ACL CAT [category]: the categories, or the commands of one.
fn cat(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    match args.len() {
        2 => {
            c.out.array(cats::NAMES.len());
            for n in cats::NAMES {
                c.out.bulk(n.as_bytes());
            }
        }
        3 => {
            let Some(bit) = cats::bit(args.get(2)) else {
                let name = args.get(2);
                return Err(CmdError::err_echo(
                    "Unknown category '",
                    &name[..name.len().min(128)],
                    "'",
                ));
            };
            let reg = registry();
            let ids: Vec<usize> = (0..reg.len()).filter(|&i| reg.cats[i] & bit != 0).collect();
            c.out.array(ids.len());
            for id in ids {
                c.out.bulk(reg.full_name(id).as_bytes());
            }
        }
        _ => return Err(wrong_args(args)),
    }
    Ok(())
}

/// Largest ACL GENPASS size in bits.
const GENPASS_MAX_BITS: i64 = 4096;

/// ACL GENPASS [bits]: random hex, 256 bits unless told.
fn genpass(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let bits = match args.len() {
        2 => 256,
        3 => crate::util::parse_i64(args.get(2)).map_err(|_| CmdError::NotInteger)?,
        _ => return Err(wrong_args(args)),
    };
    if bits <= 0 || bits > GENPASS_MAX_BITS {
        return Err(CmdError::err(format!(
            "ACL GENPASS argument must be the number of bits for the output password, a \
             positive number up to {GENPASS_MAX_BITS}"
        )));
    }
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let hex: Vec<u8> = (0..(bits + 3) / 4)
        .map(|_| b"0123456789abcdef"[rng.gen_range(0..16)])
        .collect();
    c.out.bulk(&hex);
    Ok(())
}

/// ACL LOG [count | RESET].
fn log(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let count = match args.len() {
        2 => 10,
        3 if eq_ic(args.get(2), "reset") => {
            c.server.acl.log_reset();
            c.out.ok();
            return Ok(());
        }
        3 => crate::util::parse_i64(args.get(2))
            .map_err(|_| CmdError::NotInteger)?
            .max(0),
        _ => return Err(wrong_args(args)),
    };
    let entries = c.server.acl.log_entries(count as usize);
    let now = engine::now_ms();
    let out = &mut *c.out;
    out.array(entries.len());
    for e in entries {
        out.map(7);
        out.bulk(b"count");
        out.int(e.count as i64);
        out.bulk(b"reason");
        out.bulk(e.reason.name().as_bytes());
        out.bulk(b"context");
        out.bulk(e.context.name().as_bytes());
        out.bulk(b"object");
        out.bulk(&e.object);
        out.bulk(b"username");
        out.bulk(&e.username);
        out.bulk(b"age-seconds");
        out.double(now.saturating_sub(e.ctime_ms) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(e.client_info.as_bytes());
    }
    Ok(())
}

/// ACL DRYRUN user command [arg ...]: +OK if the user may run it, or a
/// bulk string saying why not.
fn dryrun(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let Some(u) = c.server.acl.get(args.get(2)) else {
        return Err(CmdError::err_echo("User '", args.get(2), "' not found"));
    };
    let argv: Vec<Vec<u8>> = (3..args.len()).map(|i| args.get(i).to_vec()).collect();
    let owned = OwnedArgs::from_slices(&argv);
    let cmd = owned.args();
    let r = match registry().resolve(cmd) {
        Ok(r) => r,
        Err(CmdError::WrongArity(name)) => return Err(CmdError::WrongArity(name)),
        Err(_) => return Err(CmdError::err_echo("Command '", args.get(3), "' not found")),
    };
    match check::check(&u.rules(), r.id, cmd, &mut Vec::new()) {
        Ok(()) => c.out.ok(),
        Err(d) => {
            let mut s = Vec::new();
            match d {
                Denied::Command => {
                    s.extend_from_slice(b"This user has no permissions to run the '");
                    s.extend_from_slice(registry().full_name(r.id).as_bytes());
                    s.extend_from_slice(b"' command");
                }
                Denied::Key(p) | Denied::Channel(p) => {
                    s.extend_from_slice(b"This user has no permissions to access the '");
                    s.extend_from_slice(cmd.get(p));
                    s.extend_from_slice(if matches!(d, Denied::Key(_)) {
                        b"' key".as_slice()
                    } else {
                        b"' channel"
                    });
                }
            }
            c.out.bulk(&s);
        }
    }
    Ok(())
}

const NO_ACLFILE: &str = "This Redis instance is not configured to use an ACL file. You may want \
    to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you \
    have a Redis configuration file set) in order to store users in the Redis configuration.";

/// ACL SAVE: writes every user to `aclfile`.
fn save(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let (path, dir) = aclfile(c.server).ok_or(CmdError::err(NO_ACLFILE))?;
    if let Err(e) = c.server.acl.save_file(&path, dir.as_deref()) {
        crate::persist::log_warning(&format!("Writing ACL file for ACL SAVE: {e}"));
        return Err(CmdError::err(
            "There was an error trying to save the ACLs. Please check the server logs for more \
             information",
        ));
    }
    c.out.ok();
    Ok(())
}

/// ACL LOAD: replaces every user with `aclfile`'s, all or nothing; the
/// connections of the users replaced are closed.
fn load(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let (path, dir) = aclfile(c.server).ok_or(CmdError::err(NO_ACLFILE))?;
    let gone = c
        .server
        .acl
        .load_file(&path, dir.as_deref(), pubsub_all(c.server))
        .map_err(CmdError::Err)?;
    Ok(disconnect(c.nshards(), c.client.id, gone, |out| out.ok()))
}

fn help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(
        c.out,
        "ACL",
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
    Ok(())
}

/// Users from the configuration at start: `user` lines, or the `aclfile`
/// (not both), as Redis's `ACLLoadUsersAtStartup`. `Err` is the reason to
/// exit.
pub fn load_at_startup(server: &ServerShared) -> Result<(), String> {
    let cfg = server.config();
    if cfg.aclfile.is_some() && !cfg.users.is_empty() {
        return Err(
            "Configuring Redis with users defined in redis.conf and at the same setting \
                    an ACL file path is invalid. This setup is very likely to lead to \
                    configuration errors and security holes, please define either an ACL file \
                    or declare users directly in your redis.conf, but not both."
                .into(),
        );
    }
    server
        .acl
        .load_config_users(&cfg.users, cfg.acl_pubsub_default_all)
        .map_err(|e| format!("{e}\nCritical error while loading ACLs. Exiting."))?;
    if let Some(path) = &cfg.aclfile {
        server
            .acl
            .load_file(
                &path.display().to_string(),
                cfg.dir.as_deref(),
                cfg.acl_pubsub_default_all,
            )
            .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
    }
    Ok(())
}

/// The ACL log's `client-info` for `st` (its CLIENT LIST line).
fn client_info(st: &ClientState) -> String {
    crate::connection::info_line(st, &ClientIo::default(), engine::now_ms(), 0)
}

fn log_max_len(server: &ServerShared) -> usize {
    server
        .config
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .acllog_max_len as usize
}

/// Logs a refused call of `r` (the object is the command, or the argument
/// at the denied position).
pub fn log_denied(
    server: &ServerShared,
    client_info: String,
    username: &[u8],
    r: Resolved,
    args: Args<'_>,
    d: Denied,
    context: Context,
) {
    let (reason, object) = match d {
        Denied::Command => (
            Reason::Command,
            registry().full_name(r.id).as_bytes().to_vec(),
        ),
        Denied::Key(p) => (Reason::Key, args.get(p).to_vec()),
        Denied::Channel(p) => (Reason::Channel, args.get(p).to_vec()),
    };
    server.acl.log(
        LogEntry {
            count: 1,
            reason,
            context,
            object,
            username: username.to_vec(),
            ctime_ms: engine::now_ms(),
            client_info,
        },
        log_max_len(server),
    );
}

/// The NOPERM error of a refused top-level call (Redis's processCommand).
pub fn noperm(r: Resolved, d: Denied) -> CmdError {
    match d {
        Denied::Command => CmdError::NoPermCommand(registry().full_name(r.id).to_string()),
        Denied::Key(_) => CmdError::NoPermKey,
        Denied::Channel(_) => CmdError::NoPermChannel,
    }
}

/// The slow path of dispatch's check, for a client whose user is not
/// unrestricted: checks the call, logs a refusal. `Err` is the refusal
/// (the caller replies with [`noperm`] or EXEC's text).
#[cold]
pub fn check_client(
    server: &ServerShared,
    client: &mut ClientState,
    r: Resolved,
    args: Args<'_>,
    context: Context,
) -> Result<(), Denied> {
    let res = client.acl.check(&server.acl, r.id, args);
    if let Err(d) = res {
        let user = client
            .acl
            .user
            .clone()
            .unwrap_or_else(|| server.acl.default_user());
        if user.deleted() {
            // A client of a deleted user that the sweep missed.
            client.close_after_reply = true;
        }
        log_denied(server, client_info(client), &user.name, r, args, d, context);
    }
    res
}

/// Dispatch's ACL check (see `admit`): `Some(NOPERM ...)` when the call
/// may not run (the denial is logged). One relaxed load and a branch for
/// an unrestricted user.
#[inline]
pub fn refusal(
    server: &ServerShared,
    client: &mut ClientState,
    r: Resolved,
    args: Args<'_>,
) -> Option<CmdError> {
    if client.acl.user.as_ref().is_some_and(|u| u.unrestricted()) {
        return None;
    }
    let context = if client.multi.is_some() {
        Context::Multi
    } else {
        Context::Toplevel
    };
    check_client(server, client, r, args, context)
        .err()
        .map(|d| noperm(r, d))
}

/// EXEC's check of one queued command: `Err` is the reply line when the
/// rules changed since it was queued (Redis's execCommand).
pub fn check_queued(
    server: &ServerShared,
    client: &mut ClientState,
    r: Resolved,
    args: Args<'_>,
) -> Result<(), CmdError> {
    if client.acl.user.as_ref().is_some_and(|u| u.unrestricted()) {
        return Ok(());
    }
    check_client(server, client, r, args, Context::Multi).map_err(|d| {
        let reason = match d {
            Denied::Command => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        };
        CmdError::Raw(format!(
            "NOPERM ACLs rules changed between the moment the transaction was accumulated and \
             the EXEC call. This command is no longer allowed for the following reason: {reason}"
        ))
    })
}

/// AUTH / HELLO AUTH: authenticates the client as `user`, or logs the
/// failure (object: the command's name as sent) and replies WRONGPASS.
pub fn authenticate(
    c: &mut ConnCtx<'_>,
    user: &[u8],
    pass: &[u8],
    cmd_name: &[u8],
) -> Result<(), CmdError> {
    match c.server.acl.credentials(user, pass) {
        Some(u) => {
            c.client.acl = ClientAcl::of(u);
            c.client.authenticated = true;
            Ok(())
        }
        None => {
            c.server
                .acl
                .denied_auth
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let context = if c.client.multi.is_some() {
                Context::Multi
            } else {
                Context::Toplevel
            };
            c.server.acl.log(
                LogEntry {
                    count: 1,
                    reason: Reason::Auth,
                    context,
                    object: cmd_name.to_vec(),
                    username: user.to_vec(),
                    ctime_ms: engine::now_ms(),
                    client_info: client_info(c.client),
                },
                log_max_len(c.server),
            );
            Err(CmdError::WrongPass)
        }
    }
}

/// What a script needs to check its `redis.call`s: the user who ran it.
pub struct Caller {
    pub user: Arc<User>,
    pub rules: Arc<rules::Rules>,
    pub client_info: String,
    pub server: Arc<ServerShared>,
}

/// The caller of a script command, when its user is restricted (`None`:
/// nothing to check).
pub fn caller(server: &Arc<ServerShared>, client: &mut ClientState) -> Option<Arc<Caller>> {
    if client.acl.user.as_ref().is_some_and(|u| u.unrestricted()) {
        return None;
    }
    let (user, rules) = client.acl.rules(&server.acl);
    Some(Arc::new(Caller {
        user,
        rules,
        client_info: client_info(client),
        server: server.clone(),
    }))
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Caller({:?})", self.user)
    }
}

impl Caller {
    /// `redis.acl_check_cmd`: whether the user may run this call (nothing
    /// logged, as Redis's ACLCheckAllUserCommandPerm there).
    pub fn allows(&self, id: usize, args: Args<'_>) -> bool {
        check::check(&self.rules, id, args, &mut Vec::new()).is_ok()
    }

    /// Whether a selector of the user allows this call and reads every
    /// key: what a script's SORT asks before its BY / GET patterns read
    /// keys no key spec names (see `check::reads_every_key`).
    pub fn reads_every_key(&self, id: usize, args: Args<'_>) -> bool {
        check::reads_every_key(&self.rules, id, args)
    }

    /// Checks one `redis.call`; `Err` is the script's error text (Redis's
    /// scriptVerifyACL), after logging it with context `lua`.
    pub fn check(&self, r: Resolved, args: Args<'_>) -> Result<(), &'static str> {
        let Err(d) = check::check(&self.rules, r.id, args, &mut Vec::new()) else {
            return Ok(());
        };
        log_denied(
            &self.server,
            self.client_info.clone(),
            &self.user.name,
            r,
            args,
            d,
            Context::Lua,
        );
        Err(match d {
            Denied::Command => "The user executing the script can't run this command or subcommand",
            Denied::Key(_) => {
                "The user executing the script can't access at least one of the keys mentioned \
                 in the command arguments"
            }
            Denied::Channel(_) => {
                "The user executing the script can't publish to the channel mentioned in the \
                 command"
            }
        })
    }
}
