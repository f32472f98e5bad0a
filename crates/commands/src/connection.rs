//! Connection commands: state that belongs to one client (protocol,
//! selected database, name, authentication, reply mode). They run on the
//! home thread and touch no shard data, except CLIENT LIST and CLIENT KILL,
//! which must see the connections of every thread and so fan out to all of
//! them (each thread's connections are visible only to jobs running on that
//! thread, through [`ClientRegistry`](crate::coord::ClientRegistry)).
//!
//! The calling client's own state is always taken from the `ClientState`
//! the coordinator is handed, never from a thread's registry, so CLIENT
//! LIST shows this very command and CLIENT KILL of oneself closes after the
//! reply, whether or not the runtime lists the running client.
//!
//! Replies follow Redis 7.0.15 byte for byte; CLIENT SETINFO and CLIENT
//! NO-TOUCH follow Redis 7.2, which added them (CLIENT LIST keeps 7.0's
//! field set, without 7.2's `lib-name`/`lib-ver`).

use resp::{Args, Reply};

use crate::coord::{fan_out, ClientIo, Coordinator, OneStep, Plan};
use crate::ctx::{ClientState, ConnCtx, ReplyMode};
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::{eq_ic, parse_db_index, parse_i64};

mod listing;
pub use listing::Listing;
pub(crate) use listing::{LuaClient, FUNCTION_CLIENT, LUA_CLIENT};

/// Flags of HELLO, AUTH and RESET.
const HANDSHAKE: u32 = NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | SENTINEL | ALLOW_BUSY;
/// The reply of a command ended by `CLIENT UNBLOCK id ERROR` (Redis's text).
pub const UNBLOCKED_ERROR: &str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";
const CLIENT_FLAGS: u32 = NOSCRIPT | LOADING | STALE;
const CLIENT_ACL: &[&str] = &["slow", "connection"];
const CLIENT_ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous", "connection"];

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "ping",
        -1,
        FAST | SENTINEL,
        NO_KEYS,
        Exec::Conn(ping),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "echo",
        2,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(echo),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "select",
        2,
        LOADING | STALE | FAST,
        NO_KEYS,
        Exec::Conn(select),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "quit",
        -1,
        ALLOW_BUSY | NOSCRIPT | LOADING | STALE | FAST | NO_AUTH,
        NO_KEYS,
        Exec::Conn(quit),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "hello",
        -1,
        HANDSHAKE,
        NO_KEYS,
        Exec::Conn(hello),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "auth",
        -2,
        HANDSHAKE,
        NO_KEYS,
        Exec::Conn(auth),
        &["fast", "connection"],
    ),
    CommandSpec::new(
        "reset",
        1,
        HANDSHAKE,
        NO_KEYS,
        Exec::Conn(reset),
        &["fast", "connection"],
    ),
    CommandSpec::parent("client", -2, SENTINEL, &["slow"], CLIENT_SUBCOMMANDS),
];

const CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec::new(
        "id",
        2,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(client_id),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "list",
        -2,
        ADMIN | CLIENT_FLAGS,
        NO_KEYS,
        Exec::Coord(client_list),
        CLIENT_ADMIN_ACL,
    ),
    CommandSpec::new(
        "info",
        2,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Coord(client_info),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "kill",
        -3,
        ADMIN | CLIENT_FLAGS,
        NO_KEYS,
        Exec::Coord(client_kill),
        CLIENT_ADMIN_ACL,
    ),
    CommandSpec::new(
        "unblock",
        -3,
        ADMIN | CLIENT_FLAGS,
        NO_KEYS,
        Exec::Coord(client_unblock),
        CLIENT_ADMIN_ACL,
    ),
    CommandSpec::new(
        "setname",
        3,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(client_setname),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "getname",
        2,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(client_getname),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "setinfo",
        4,
        CLIENT_FLAGS | SENTINEL,
        NO_KEYS,
        Exec::Conn(client_setinfo),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "reply",
        3,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(client_reply),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "no-evict",
        3,
        ADMIN | CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(client_no_evict),
        CLIENT_ADMIN_ACL,
    ),
    CommandSpec::new(
        "no-touch",
        3,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(client_no_touch),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "tracking",
        -3,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(crate::tracking::client_tracking),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "caching",
        3,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(crate::tracking::client_caching),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "getredir",
        2,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(crate::tracking::client_getredir),
        CLIENT_ACL,
    ),
    CommandSpec::new(
        "trackinginfo",
        2,
        CLIENT_FLAGS,
        NO_KEYS,
        Exec::Conn(crate::tracking::client_trackinginfo),
        CLIENT_ACL,
    ),
    crate::ops::CLIENT_PAUSE,
    crate::ops::CLIENT_UNPAUSE,
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(client_help),
        CLIENT_ACL,
    ),
];

/// PING [message]: PONG, or the message as a bulk string.
fn ping(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if c.client.subs.is_some() && !c.client.resp3 && args.len() <= 2 {
        // Subscribed RESP2 clients read every reply as a message.
        c.out.array(2);
        c.out.bulk(b"pong");
        c.out.bulk(if args.len() == 2 { args.get(1) } else { b"" });
        return Ok(());
    }
    match args.len() {
        1 => c.out.simple("PONG"),
        2 => c.out.bulk(args.get(1)),
        _ => return Err(CmdError::WrongArity("ping".into())),
    }
    Ok(())
}

fn echo(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.out.bulk(args.get(1));
    Ok(())
}

fn select(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.client.db = parse_db_index(args.get(1), c.server.databases())?;
    c.out.ok();
    Ok(())
}

/// QUIT: +OK, then the connection closes.
fn quit(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.ok();
    c.client.close_after_reply = true;
    Ok(())
}

/// AUTH [username] password: +OK, WRONGPASS (logged in ACL LOG), or an
/// error when the one-argument form is used while the default user needs
/// no password.
fn auth(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    if args.len() > 3 {
        return Err(CmdError::Syntax);
    }
    if args.len() == 2 {
        if c.server.acl.default_user().rules().nopass() {
            return Err(CmdError::err(
                "AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ));
        }
        crate::acl::authenticate(c, b"default", args.get(1), args.get(0))?;
    } else {
        crate::acl::authenticate(c, args.get(1), args.get(2), args.get(0))?;
    }
    c.out.ok();
    Ok(())
}

/// Redis's client name / attribute charset: printable ASCII without space,
/// so CLIENT LIST stays splittable on spaces.
fn valid_attr(v: &[u8]) -> bool {
    v.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn set_name(c: &mut ConnCtx<'_>, name: &[u8]) -> Result<(), CmdError> {
    check_name(name)?;
    c.client.name = (!name.is_empty()).then(|| name.to_vec());
    c.server.ops.slowlog.renamed(c.client);
    Ok(())
}

/// Redis's `validateClientName`.
fn check_name(name: &[u8]) -> Result<(), CmdError> {
    if valid_attr(name) {
        Ok(())
    } else {
        Err(CmdError::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

/// HELLO [protover [AUTH user pass] [SETNAME name]]: switches protocol,
/// optionally authenticates and names the client, and replies with the
/// server's properties as a map, in the new protocol.
fn hello(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut ver = 0;
    if args.len() >= 2 {
        ver = resp::string2ll(args.get(1)).ok_or(CmdError::err(
            "Protocol version is not an integer or out of range",
        ))?;
        if !(2..=3).contains(&ver) {
            return Err(CmdError::Raw("NOPROTO unsupported protocol version".into()));
        }
    }
    let (mut creds, mut name) = (None, None);
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if eq_ic(opt, "auth") && more >= 2 {
            creds = Some((args.get(j + 1), args.get(j + 2)));
            j += 2;
        } else if eq_ic(opt, "setname") && more >= 1 {
            // Checked here, so errors come in argument order (Redis).
            check_name(args.get(j + 1))?;
            name = Some(args.get(j + 1));
            j += 1;
        } else {
            return Err(CmdError::err_echo(
                "Syntax error in HELLO option '",
                opt,
                "'",
            ));
        }
        j += 1;
    }
    if let Some((user, pass)) = creds {
        crate::acl::authenticate(c, user, pass, args.get(0))?;
    }
    if !c.client.authenticated {
        return Err(CmdError::Raw(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        ));
    }
    if let Some(n) = name {
        set_name(c, n)?;
    }
    if ver != 0 {
        c.client.resp3 = ver == 3;
        c.out.set_resp3(ver == 3);
    }
    let out = &mut *c.out;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::server::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(if c.client.resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(c.client.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(if c.server.repl.is_replica() {
        b"replica".as_slice()
    } else {
        b"master"
    });
    out.bulk(b"modules");
    out.array(0);
    Ok(())
}

/// RESET: back to a fresh connection's state (database 0, RESP2, no name,
/// replies on, no-evict/no-touch off, tracking off, no subscriptions, no
/// transaction or watch, the default user, authenticated only if that
/// needs no password). Replies +RESET.
fn reset(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let auth = c.server.acl.default_open();
    let cl = &mut *c.client;
    cl.acl = crate::acl::ClientAcl::of(c.server.acl.default_user());
    cl.db = 0;
    cl.resp3 = false;
    if cl.name.take().is_some() {
        c.server.ops.slowlog.renamed(cl);
    }
    // Redis clears REPLY_OFF and SKIP_NEXT but not the skip of this very
    // command (CLIENT REPLY SKIP; RESET sends nothing).
    if cl.reply_mode != ReplyMode::Skipping {
        cl.reply_mode = ReplyMode::On;
    }
    cl.no_evict = false;
    cl.no_touch = false;
    cl.authenticated = auth;
    cl.multi = None;
    cl.multi_count = None;
    cl.watch = None;
    crate::pubsub::unsubscribe_all(c.server, cl);
    crate::ops::monitor::stop(c.server, cl);
    c.server.tracking.disable(cl);
    c.out.set_resp3(false);
    c.out.simple("RESET");
    Ok(())
}

fn client_id(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.int(c.client.id as i64);
    Ok(())
}

fn client_setname(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    set_name(c, args.get(2))?;
    c.out.ok();
    Ok(())
}

/// CLIENT GETNAME: the name, or null.
fn client_getname(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.optional_bulk(c.client.name.as_deref());
    Ok(())
}

/// CLIENT SETINFO LIB-NAME|LIB-VER value (Redis 7.2); empty clears.
fn client_setinfo(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let attr = args.get(2);
    let val = args.get(3);
    let lib_name = if eq_ic(attr, "lib-name") {
        true
    } else if eq_ic(attr, "lib-ver") {
        false
    } else {
        return Err(CmdError::err_echo("Unrecognized option '", attr, "'"));
    };
    if !valid_attr(val) {
        return Err(CmdError::err_echo(
            "",
            attr,
            " cannot contain spaces, newlines or special characters.",
        ));
    }
    let v = (!val.is_empty()).then(|| val.to_vec());
    if lib_name {
        c.client.lib_name = v;
    } else {
        c.client.lib_ver = v;
    }
    c.out.ok();
    Ok(())
}

/// CLIENT REPLY ON|OFF|SKIP: OFF and SKIP reply nothing (the runtime drops
/// replies per `reply_mode`).
fn client_reply(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let a = args.get(2);
    if eq_ic(a, "on") {
        c.client.reply_mode = ReplyMode::On;
        c.out.ok();
    } else if eq_ic(a, "off") {
        c.client.reply_mode = ReplyMode::Off;
    } else if eq_ic(a, "skip") {
        if c.client.reply_mode != ReplyMode::Off {
            c.client.reply_mode = ReplyMode::Skip;
        }
    } else {
        return Err(CmdError::Syntax);
    }
    Ok(())
}

fn on_off(arg: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(arg, "on") {
        Ok(true)
    } else if eq_ic(arg, "off") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

fn client_no_evict(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.client.no_evict = on_off(args.get(2))?;
    c.out.ok();
    Ok(())
}

/// CLIENT NO-TOUCH ON|OFF (Redis 7.2): reads stop updating access times.
fn client_no_touch(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    c.client.no_touch = on_off(args.get(2))?;
    c.out.ok();
    Ok(())
}

/// Client types of CLIENT LIST TYPE / CLIENT KILL TYPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientType {
    Normal,
    Replica,
    PubSub,
    Master,
}

fn parse_type(arg: &[u8]) -> Result<ClientType, CmdError> {
    Ok(if eq_ic(arg, "normal") {
        ClientType::Normal
    } else if eq_ic(arg, "slave") || eq_ic(arg, "replica") {
        ClientType::Replica
    } else if eq_ic(arg, "pubsub") {
        ClientType::PubSub
    } else if eq_ic(arg, "master") {
        ClientType::Master
    } else {
        return Err(CmdError::err_echo("Unknown client type '", arg, "'"));
    })
}

fn subscriptions(st: &ClientState) -> usize {
    st.sub_count + st.psub_count + st.ssub_count
}

fn type_of(st: &ClientState) -> ClientType {
    if st.master {
        ClientType::Master
    } else if subscriptions(st) > 0 {
        ClientType::PubSub
    } else {
        ClientType::Normal
    }
}

/// One CLIENT LIST / CLIENT INFO line, Redis 7.0's fields in its order,
/// without the trailing newline. `argv_mem`: bytes of the arguments being
/// executed (the caller's own command; 0 for idle clients).
pub(crate) fn info_line(st: &ClientState, io: &ClientIo, now_ms: u64, argv_mem: usize) -> String {
    let mut flags = String::new();
    if st.monitor {
        flags.push('O');
    }
    if st.master {
        flags.push('M');
    }
    if subscriptions(st) > 0 {
        flags.push('P');
    }
    if st.multi_count.is_some() {
        flags.push('x');
    }
    if st.blocked {
        flags.push('b');
    }
    if let Some(t) = &st.tracking {
        flags.push('t');
        if t.broken_redirect {
            flags.push('R');
        }
        if t.bcast {
            flags.push('B');
        }
    }
    if st.close_after_reply {
        flags.push('c');
    }
    if st.unix {
        flags.push('U');
    }
    if st.no_evict {
        flags.push('e');
    }
    if st.no_touch {
        flags.push('T');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let now_s = now_ms / 1000;
    let name = st.name.as_deref().map(String::from_utf8_lossy);
    let cmd = if st.last_cmd.is_empty() {
        "NULL"
    } else {
        &st.last_cmd
    };
    let events = if io.obl > 0 || io.oll > 0 { "rw" } else { "r" };
    format!(
        "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} \
         ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem=0 rbs={} rbp={} obl={} \
         oll={} omem={} tot-mem={} events={} cmd={} user={} redir={} resp={}",
        st.id,
        st.addr,
        st.laddr,
        st.fd,
        name.as_deref().unwrap_or(""),
        now_s.saturating_sub(st.created_ms / 1000),
        now_s.saturating_sub(st.last_interaction_ms / 1000),
        flags,
        st.db,
        st.sub_count,
        st.psub_count,
        st.ssub_count,
        st.multi_count.map_or(-1, |n| n as i64),
        io.qbuf,
        io.qbuf_free,
        argv_mem,
        io.rbs,
        io.rbp,
        io.obl,
        io.oll,
        io.omem,
        io.tot_mem,
        events,
        cmd,
        String::from_utf8_lossy(st.acl.name()),
        st.tracking.as_ref().map_or(-1, |t| t.redirect as i64),
        if st.resp3 { 3 } else { 2 },
    )
}

/// CLIENT INFO: this connection's CLIENT LIST line (verbatim in RESP3).
/// Its buffer figures belong to the runtime, so a job on the home thread
/// reads them (the line of a connection unknown there, as in-process
/// tests, shows zeros).
fn client_info(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let me = c.client.id;
    let argv_mem = args.bytes();
    let mut plan = Plan::default();
    plan.run(c.home, move |env| {
        let mut mine = None;
        env.clients.for_each(&mut |st, io| {
            if st.id == me {
                mine = Some(io.clone());
            }
        });
        mine
    });
    Ok(OneStep::boxed(
        plan,
        move |mut io: Vec<Option<ClientIo>>, out: &mut Reply, client: &mut ClientState| {
            let io = io.pop().flatten().unwrap_or_default();
            let mut s = info_line(client, &io, engine::now_ms(), argv_mem);
            s.push('\n');
            out.verbatim("txt", s.as_bytes());
            Ok(())
        },
    ))
}

/// What every thread reports for CLIENT LIST: the lines of its other
/// connections, and the I/O figures of the caller if it lives there.
type ListPart = (Vec<(u64, String)>, Option<ClientIo>);

/// CLIENT LIST [TYPE type] [ID id ...]: one line per client, in id order
/// (in the order given with ID, repeats included).
fn client_list(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let (typ, ids) = list_filter(args)?;
    let me = c.client.id;
    let argv_mem = args.bytes();
    let wanted = ids.clone();
    let server = c.server.clone();
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let now = env.shard.now_ms;
            let mut lines = Vec::new();
            let mut my_io = None;
            env.clients.for_each(&mut |st, io| {
                if st.id == me {
                    my_io = Some(io.clone());
                } else if typ.is_none_or(|t| type_of(st) == t)
                    && wanted.as_ref().is_none_or(|w| w.contains(&st.id))
                {
                    lines.push((st.id, info_line(st, io, now, 0)));
                }
            });
            (lines, my_io)
        },
        move |parts: Vec<ListPart>, out: &mut Reply, client: &mut ClientState| {
            let mut my_io = None;
            let mut lines = Vec::new();
            for (l, io) in parts {
                lines.extend(l);
                my_io = my_io.or(io);
            }
            if typ.is_none_or(|t| type_of(client) == t) {
                let io = my_io.unwrap_or_default();
                lines.push((me, info_line(client, &io, engine::now_ms(), argv_mem)));
            }
            if typ.is_none_or(|t| t == ClientType::Replica) {
                let now = engine::now_ms();
                for r in server.repl.lock().master.replicas.iter() {
                    lines.push((r.id, replica_line(r, now)));
                }
            }
            write_list(lines, ids.as_deref(), out);
            Ok(())
        },
    ))
}

/// CLIENT LIST's filter: [TYPE type] or [ID id ...], with Redis's errors.
fn list_filter(args: Args<'_>) -> Result<(Option<ClientType>, Option<Vec<u64>>), CmdError> {
    let mut typ = None;
    let mut ids: Option<Vec<u64>> = None;
    if args.len() == 4 && eq_ic(args.get(2), "type") {
        typ = Some(parse_type(args.get(3))?);
    } else if args.len() > 3 && eq_ic(args.get(2), "id") {
        let mut v = Vec::with_capacity(args.len() - 3);
        for a in args.iter().skip(3) {
            let id = resp::string2ll(a).ok_or(CmdError::err("Invalid client ID"))?;
            v.push(id as u64);
        }
        ids = Some(v);
    } else if args.len() != 2 {
        return Err(CmdError::Syntax);
    }
    Ok((typ, ids))
}

/// CLIENT LIST's reply: `lines` in id order, or in the order `ids` gives
/// (repeats included).
fn write_list(mut lines: Vec<(u64, String)>, ids: Option<&[u64]>, out: &mut Reply) {
    lines.sort_by_key(|(id, _)| *id);
    let mut s = String::new();
    let mut emit = |l: &str| {
        s.push_str(l);
        s.push('\n');
    };
    match ids {
        Some(ids) => {
            for id in ids {
                if let Ok(i) = lines.binary_search_by_key(id, |(i, _)| *i) {
                    emit(&lines[i].1);
                }
            }
        }
        None => lines.iter().for_each(|(_, l)| emit(l)),
    }
    out.verbatim("txt", s.as_bytes());
}

/// The CLIENT LIST line of an attached replica (its socket belongs to
/// the replication threads): flags `S`, its last command PSYNC.
fn replica_line(r: &crate::repl::ReplicaInfo, now_ms: u64) -> String {
    let st = replica_state(r);
    info_line(&st, &ClientIo::default(), now_ms, 0).replacen(" flags=N ", " flags=S ", 1)
}

/// A replica as a client state, for its CLIENT LIST line and the
/// CLIENT KILL filters.
fn replica_state(r: &crate::repl::ReplicaInfo) -> ClientState {
    ClientState {
        id: r.id,
        addr: r.addr.clone(),
        laddr: r.laddr.clone(),
        fd: r.fd,
        name: r.name.clone(),
        created_ms: r.created_ms,
        last_interaction_ms: r.ack_ms,
        last_cmd: "replconf".into(),
        ..Default::default()
    }
}

/// Which clients CLIENT KILL closes.
#[derive(Clone, Default)]
struct KillFilter {
    id: Option<u64>,
    typ: Option<ClientType>,
    addr: Option<Vec<u8>>,
    laddr: Option<Vec<u8>>,
    skipme: bool,
    /// Only clients older than this many seconds (Redis 7.4's MAXAGE).
    max_age_s: Option<i64>,
    /// Only clients authenticated as this user.
    user: Option<Vec<u8>>,
}

impl KillFilter {
    fn matches(&self, st: &ClientState, now_ms: u64) -> bool {
        self.id.is_none_or(|id| st.id == id)
            && self.typ.is_none_or(|t| type_of(st) == t)
            && self.addr.as_ref().is_none_or(|a| a == st.addr.as_bytes())
            && self.laddr.as_ref().is_none_or(|a| a == st.laddr.as_bytes())
            && self.user.as_ref().is_none_or(|u| u == st.acl.name())
            && self
                .max_age_s
                .is_none_or(|m| (now_ms / 1000).saturating_sub(st.created_ms / 1000) as i64 > m)
    }
}

/// CLIENT KILL ip:port (+OK or "No such client"), or CLIENT KILL <filter>
/// <value> ... (the number of clients killed). The caller is closed after
/// its reply when it matches (only with SKIPME no in the filter form).
fn client_kill(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    let old_form = args.len() == 3;
    let mut f = KillFilter {
        skipme: !old_form,
        ..Default::default()
    };
    if old_form {
        f.addr = Some(args.get(2).to_vec());
    } else {
        let mut i = 2;
        while i < args.len() {
            let opt = args.get(i);
            let Some(val) = (i + 1 < args.len()).then(|| args.get(i + 1)) else {
                return Err(CmdError::Syntax);
            };
            if eq_ic(opt, "id") {
                let id = resp::string2ll(val)
                    .filter(|&n| n >= 1)
                    .ok_or(CmdError::err("client-id should be greater than 0"))?;
                f.id = Some(id as u64);
            } else if eq_ic(opt, "type") {
                f.typ = Some(parse_type(val)?);
            } else if eq_ic(opt, "addr") {
                f.addr = Some(val.to_vec());
            } else if eq_ic(opt, "laddr") {
                f.laddr = Some(val.to_vec());
            } else if eq_ic(opt, "user") {
                if c.server.acl.get(val).is_none() {
                    return Err(CmdError::err_echo("No such user '", val, "'"));
                }
                f.user = Some(val.to_vec());
            } else if eq_ic(opt, "skipme") {
                f.skipme = if eq_ic(val, "yes") {
                    true
                } else if eq_ic(val, "no") {
                    false
                } else {
                    return Err(CmdError::Syntax);
                };
            } else if eq_ic(opt, "maxage") {
                f.max_age_s = Some(parse_i64(val)?);
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
    }
    let me = c.client.id;
    let job_filter = f.clone();
    let server = c.server.clone();
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let now = env.shard.now_ms;
            let mut victims = Vec::new();
            env.clients.for_each(&mut |st, _| {
                if st.id != me && job_filter.matches(st, now) {
                    victims.push(st.id);
                }
            });
            victims
                .into_iter()
                .filter(|&id| env.clients.kill(id))
                .count()
        },
        move |killed: Vec<usize>, out: &mut Reply, client: &mut ClientState| {
            let mut n: usize = killed.iter().sum();
            if f.typ.is_none_or(|t| t == ClientType::Replica) {
                // Attached replicas: their socket is shut down; the
                // replication threads see it and let the link go.
                let any_type = KillFilter {
                    typ: None,
                    user: None,
                    ..f.clone()
                };
                let now = engine::now_ms();
                for r in server.repl.lock().master.replicas.iter() {
                    if any_type.matches(&replica_state(r), now)
                        && f.user.as_ref().is_none_or(|u| *u == r.user.as_bytes())
                    {
                        // SAFETY: the fd stays open while the entry is
                        // listed (the runtime removes it before closing).
                        unsafe {
                            libc::shutdown(r.fd, libc::SHUT_RDWR);
                        }
                        n += 1;
                    }
                }
            }
            if !f.skipme && f.matches(client, engine::now_ms()) {
                client.close_after_reply = true;
                n += 1;
            }
            if old_form {
                if n == 0 {
                    return Err(CmdError::err("No such client"));
                }
                out.ok();
            } else {
                out.int(n as i64);
            }
            Ok(())
        },
    ))
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: `:1` if that client was blocked
/// (BLPOP & co.) and is now unblocked, `:0` otherwise.
fn client_unblock(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<Box<dyn Coordinator>, CmdError> {
    if args.len() > 4 {
        return Err(CmdError::err_echo(
            "unknown subcommand or wrong number of arguments for '",
            args.get(1),
            "'. Try CLIENT HELP.",
        ));
    }
    let id = parse_i64(args.get(2))?;
    let error = match args.len() {
        3 => false,
        4 if eq_ic(args.get(3), "timeout") => false,
        4 if eq_ic(args.get(3), "error") => true,
        4 => {
            return Err(CmdError::err(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
            ))
        }
        _ => false,
    };
    let id = u64::try_from(id).unwrap_or(0);
    let ops = c.server.ops;
    Ok(fan_out(
        c.nshards(),
        move |env| {
            let Some(cmd) = env.clients.unblock(id, error) else {
                return false;
            };
            // Redis 7.0.15's CLIENT UNBLOCK: the error reply counts in
            // errorstats and total_error_replies (addReplyError on the
            // target), and the command as a failed call with or without
            // ERROR (it passes had_errors=1 to updateStatsOnUnblock either
            // way). Tessera counts a blocked call when it ends.
            if error {
                env.stats.count_error(UNBLOCKED_ERROR.as_bytes());
            }
            let _ = crate::exec::record_us(env.stats, ops, cmd, 0, true);
            true
        },
        |done: Vec<bool>, out: &mut Reply, _: &mut ClientState| {
            out.int(i64::from(done.contains(&true)));
            Ok(())
        },
    ))
}

fn client_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(
        c.out,
        "CLIENT",
        &[
            "CACHING (YES|NO)",
            "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
            "GETREDIR",
            "    Return the client ID we are redirecting to when tracking is enabled.",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are:",
            "    * ADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made from the specified address",
            "    * LADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made to specified local address",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Kill connections by type.",
            "    * USER <username>",
            "      Kill connections authenticated by <username>.",
            "    * SKIPME (YES|NO)",
            "      Skip killing current connection (default: yes).",
            "LIST [options ...]",
            "    Return information about client connections. Options:",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
            "UNPAUSE",
            "    Stop the current client pause, resuming traffic.",
            "PAUSE <timeout> [WRITE|ALL]",
            "    Suspend all, or just write, clients for <timeout> milliseconds.",
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "    Unblock the specified blocked client.",
            "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
            "         [OPTIN] [OPTOUT] [NOLOOP]",
            "    Control server assisted client side caching.",
            "TRACKINGINFO",
            "    Report tracking status for the current connection.",
            "NO-EVICT (ON|OFF)",
            "    Protect current client connection from eviction.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    /// Redis 7.0.15's HELLO map for client id 1.
    fn hello_body(proto: u8) -> String {
        format!(
            "$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n\
             :{proto}\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n\
             $6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
        )
    }

    fn set_requirepass(t: &mut TestServer, pw: &str) {
        assert_eq!(t.run(&["CONFIG", "SET", "requirepass", pw]), "+OK\r\n");
    }

    #[test]
    fn ping_echo_select_quit() {
        let mut t = TestServer::new(2);
        assert_eq!(t.run(&["PING"]), "+PONG\r\n");
        assert_eq!(t.run(&["PING", "hi"]), "$2\r\nhi\r\n");
        assert_eq!(
            t.run(&["PING", "a", "b"]),
            "-ERR wrong number of arguments for 'ping' command\r\n"
        );
        assert_eq!(t.run(&["ECHO", "x"]), "$1\r\nx\r\n");
        assert_eq!(t.run(&["SELECT", "3"]), "+OK\r\n");
        assert_eq!(t.client.db, 3);
        assert_eq!(
            t.run(&["SELECT", "16"]),
            "-ERR DB index is out of range\r\n"
        );
        assert_eq!(t.run(&["QUIT"]), "+OK\r\n");
        assert!(t.client.close_after_reply);
    }

    #[test]
    fn hello() {
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["HELLO"]), format!("*14\r\n{}", hello_body(2)));
        assert_eq!(t.run(&["HELLO", "3"]), format!("%7\r\n{}", hello_body(3)));
        assert!(t.client.resp3);
        assert_eq!(t.run(&["HELLO"]), format!("%7\r\n{}", hello_body(3)));
        assert_eq!(
            t.run(&["HELLO", "2", "SETNAME", "foo"]),
            format!("*14\r\n{}", hello_body(2))
        );
        assert!(!t.client.resp3);
        assert_eq!(t.run(&["CLIENT", "GETNAME"]), "$3\r\nfoo\r\n");
        assert_eq!(
            t.run(&["HELLO", "4"]),
            "-NOPROTO unsupported protocol version\r\n"
        );
        assert_eq!(
            t.run(&["HELLO", "1"]),
            "-NOPROTO unsupported protocol version\r\n"
        );
        assert_eq!(
            t.run(&["HELLO", "x"]),
            "-ERR Protocol version is not an integer or out of range\r\n"
        );
        assert_eq!(
            t.run(&["HELLO", "3", "FOO"]),
            "-ERR Syntax error in HELLO option 'FOO'\r\n"
        );
        assert_eq!(
            t.run(&["HELLO", "3", "AUTH", "x"]),
            "-ERR Syntax error in HELLO option 'AUTH'\r\n"
        );
        assert!(!t.client.resp3, "errors leave the protocol alone");
        // No requirepass: the default user takes any password.
        assert_eq!(
            t.run(&["HELLO", "3", "AUTH", "default", "x"]),
            format!("%7\r\n{}", hello_body(3))
        );
        assert_eq!(
            t.run(&["HELLO", "3", "AUTH", "bob", "x"]),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
        assert_eq!(
            t.run(&["HELLO", "2", "SETNAME", "a b"]),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        );
    }

    #[test]
    fn auth_and_requirepass() {
        let mut t = TestServer::new(1);
        assert_eq!(
            t.run(&["AUTH", "x"]),
            "-ERR AUTH <password> called without any password configured for the default \
             user. Are you sure your configuration is correct?\r\n"
        );
        assert_eq!(t.run(&["AUTH", "default", "x"]), "+OK\r\n");
        assert_eq!(
            t.run(&["AUTH", "a", "b"]),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
        assert_eq!(t.run(&["AUTH", "a", "b", "c"]), "-ERR syntax error\r\n");
        set_requirepass(&mut t, "pw");
        assert_eq!(t.run(&["RESET"]), "+RESET\r\n");
        assert!(!t.client.authenticated);
        assert_eq!(t.run(&["PING"]), "-NOAUTH Authentication required.\r\n");
        assert_eq!(
            t.run(&["HELLO", "3"]),
            "-NOAUTH HELLO must be called with the client already authenticated, otherwise \
             the HELLO AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time\r\n"
        );
        assert_eq!(
            t.run(&["AUTH", "nope"]),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
        assert_eq!(
            t.run(&["HELLO", "3", "AUTH", "default", "nope"]),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
        assert_eq!(t.run(&["AUTH", "pw"]), "+OK\r\n");
        assert_eq!(t.run(&["PING"]), "+PONG\r\n");
        t.run(&["RESET"]);
        assert_eq!(
            t.run(&["HELLO", "3", "AUTH", "default", "pw", "SETNAME", "x"]),
            format!("%7\r\n{}", hello_body(3))
        );
        assert_eq!(t.run(&["CLIENT", "GETNAME"]), "$1\r\nx\r\n");
    }

    #[test]
    fn reset() {
        let mut t = TestServer::new(2);
        t.run(&["HELLO", "3", "SETNAME", "n"]);
        t.run(&["SELECT", "2"]);
        t.run(&["CLIENT", "NO-EVICT", "on"]);
        t.run(&["CLIENT", "NO-TOUCH", "on"]);
        assert_eq!(
            t.run(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p"]),
            "+OK\r\n"
        );
        assert_eq!(t.run(&["RESET"]), "+RESET\r\n");
        let c = &t.client;
        assert!(!c.resp3 && c.name.is_none() && c.db == 0 && !c.no_evict && !c.no_touch);
        assert!(c.tracking.is_none());
        assert_eq!(t.server.tracking.counts(), (0, 0));
        assert!(c.authenticated);
        assert_eq!(t.run(&["CLIENT", "GETNAME"]), "$-1\r\n");
    }

    #[test]
    fn client_simple_subcommands() {
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["CLIENT", "ID"]), ":1\r\n");
        assert_eq!(t.run(&["CLIENT", "GETNAME"]), "$-1\r\n");
        assert_eq!(t.run(&["CLIENT", "SETNAME", "a"]), "+OK\r\n");
        assert_eq!(t.run(&["CLIENT", "GETNAME"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["CLIENT", "SETNAME", ""]), "+OK\r\n");
        assert_eq!(t.run(&["CLIENT", "GETNAME"]), "$-1\r\n");
        assert_eq!(
            t.run(&["CLIENT", "SETNAME", "a\nb"]),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        );
        assert_eq!(
            t.run(&["CLIENT", "SETNAME"]),
            "-ERR wrong number of arguments for 'client|setname' command\r\n"
        );
        assert_eq!(
            t.run(&["CLIENT", "ID", "x"]),
            "-ERR wrong number of arguments for 'client|id' command\r\n"
        );
        assert_eq!(
            t.run(&["CLIENT", "FOO"]),
            "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"
        );
        assert_eq!(
            t.run(&["CLIENT"]),
            "-ERR wrong number of arguments for 'client' command\r\n"
        );
        assert_eq!(t.run(&["CLIENT", "NO-EVICT", "on"]), "+OK\r\n");
        assert!(t.client.no_evict);
        assert_eq!(t.run(&["CLIENT", "NO-EVICT", "OFF"]), "+OK\r\n");
        assert!(!t.client.no_evict);
        assert_eq!(t.run(&["CLIENT", "NO-EVICT", "x"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["CLIENT", "NO-TOUCH", "on"]), "+OK\r\n");
        assert!(t.client.no_touch);
        assert_eq!(t.run(&["CLIENT", "NO-TOUCH", "x"]), "-ERR syntax error\r\n");
        let help = t.run(&["CLIENT", "HELP"]);
        assert!(help.starts_with(
            "*48\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n\
             +CACHING (YES|NO)\r\n"
        ));
        assert!(help.ends_with("+HELP\r\n+    Prints this help.\r\n"));
    }

    #[test]
    fn client_setinfo() {
        let mut t = TestServer::new(1);
        assert_eq!(
            t.run(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]),
            "+OK\r\n"
        );
        assert_eq!(t.run(&["CLIENT", "SETINFO", "lib-ver", "5.0"]), "+OK\r\n");
        assert_eq!(t.client.lib_name.as_deref(), Some(&b"redis-py"[..]));
        assert_eq!(t.client.lib_ver.as_deref(), Some(&b"5.0"[..]));
        assert_eq!(
            t.run(&["CLIENT", "SETINFO", "foo", "x"]),
            "-ERR Unrecognized option 'foo'\r\n"
        );
        assert_eq!(
            t.run(&["CLIENT", "SETINFO", "lib-name", "a b"]),
            "-ERR lib-name cannot contain spaces, newlines or special characters.\r\n"
        );
        assert_eq!(t.run(&["CLIENT", "SETINFO", "lib-name", ""]), "+OK\r\n");
        assert!(t.client.lib_name.is_none());
    }

    #[test]
    fn client_reply_modes() {
        let mut t = TestServer::new(1);
        assert_eq!(t.run(&["CLIENT", "REPLY", "OFF"]), "");
        assert_eq!(t.client.reply_mode, ReplyMode::Off);
        assert_eq!(t.run(&["CLIENT", "REPLY", "SKIP"]), "");
        assert_eq!(
            t.client.reply_mode,
            ReplyMode::Off,
            "SKIP does not undo OFF"
        );
        assert_eq!(t.run(&["CLIENT", "REPLY", "ON"]), "+OK\r\n");
        assert_eq!(t.client.reply_mode, ReplyMode::On);
        assert_eq!(t.run(&["CLIENT", "REPLY", "SKIP"]), "");
        assert_eq!(t.client.reply_mode, ReplyMode::Skip);
        t.client.reply_mode = ReplyMode::On;
        assert_eq!(t.run(&["CLIENT", "REPLY", "foo"]), "-ERR syntax error\r\n");
    }

    fn setup_addr(t: &mut TestServer) {
        t.client.addr = "127.0.0.1:5000".into();
        t.client.laddr = "127.0.0.1:6379".into();
        t.client.fd = 8;
        // Far in the future: age and idle are 0 however long the test runs.
        t.client.created_ms = u64::MAX / 2;
        t.client.last_interaction_ms = u64::MAX / 2;
    }

    fn line(cmd: &str, flags: &str, name: &str, resp: u8, argv_mem: usize) -> String {
        format!(
            "id=1 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=8 name={name} age=0 idle=0 \
             flags={flags} db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 \
             argv-mem={argv_mem} multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 \
             events=r cmd={cmd} user=default redir=-1 resp={resp}\n"
        )
    }

    /// CLIENT LIST's `cmd` is the last command whose name resolved, as
    /// Redis's processCommand records it: also when queued in MULTI or
    /// refused for its arity; NULL after an unknown command.
    #[test]
    fn last_command_is_recorded_as_redis_does() {
        let mut t = TestServer::new(2);
        for (cmd, last) in [
            (&["MULTI"][..], "multi"),
            (&["GET", "a"], "get"),
            (&["SET", "a"], "set"),
            (&["CLIENT", "NOSUCH"], ""),
            (&["DISCARD"], "discard"),
            (&["NOSUCH"], ""),
            (&["CLIENT", "ID", "x"], "client|id"),
            (&["CLIENT"], "client"),
        ] {
            t.run(cmd);
            assert_eq!(t.client.last_cmd, last, "after {cmd:?}");
        }
    }

    #[test]
    fn client_info_and_list() {
        for n in [1, 2, 4] {
            let mut t = TestServer::new(n);
            setup_addr(&mut t);
            let l = line("client|info", "N", "", 2, 10);
            assert_eq!(
                t.run(&["CLIENT", "INFO"]),
                format!("${}\r\n{l}\r\n", l.len())
            );
            t.run(&["CLIENT", "SETNAME", "me"]);
            t.run(&["CLIENT", "NO-EVICT", "on"]);
            let l = line("client|list", "e", "me", 2, 10);
            assert_eq!(
                t.run(&["CLIENT", "LIST"]),
                format!("${}\r\n{l}\r\n", l.len())
            );
            let l = line("client|list", "e", "me", 2, 20);
            assert_eq!(
                t.run(&["CLIENT", "LIST", "TYPE", "normal"]),
                format!("${}\r\n{l}\r\n", l.len())
            );
            assert_eq!(t.run(&["CLIENT", "LIST", "TYPE", "pubsub"]), "$0\r\n\r\n");
            assert_eq!(
                t.run(&["CLIENT", "LIST", "TYPE", "foo"]),
                "-ERR Unknown client type 'foo'\r\n"
            );
            let l = line("client|list", "e", "me", 2, 15);
            assert_eq!(
                t.run(&["CLIENT", "LIST", "ID", "1", "9", "1"]),
                format!("${}\r\n{l}{l}\r\n", 2 * l.len())
            );
            assert_eq!(
                t.run(&["CLIENT", "LIST", "ID", "1", "x"]),
                "-ERR Invalid client ID\r\n"
            );
            assert_eq!(t.run(&["CLIENT", "LIST", "ID"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["CLIENT", "LIST", "foo"]), "-ERR syntax error\r\n");
            t.client.resp3 = true;
            let l = line("client|info", "e", "me", 3, 10);
            assert_eq!(
                t.run(&["CLIENT", "INFO"]),
                format!("={}\r\ntxt:{l}\r\n", l.len() + 4)
            );
        }
    }

    #[test]
    fn info_line_flags_and_counts() {
        let st = ClientState {
            id: 7,
            unix: true,
            sub_count: 2,
            multi_count: Some(3),
            last_cmd: "get".into(),
            ..Default::default()
        };
        let io = ClientIo {
            qbuf: 5,
            obl: 3,
            ..Default::default()
        };
        let l = info_line(&st, &io, 0, 0);
        assert!(l.contains(" flags=PxU "), "{l}");
        assert!(l.contains(" sub=2 psub=0 ssub=0 multi=3 qbuf=5 "), "{l}");
        assert!(l.contains(" events=rw cmd=get "), "{l}");
        assert!(info_line(&ClientState::default(), &io, 0, 0).contains(" cmd=NULL "));
    }

    #[test]
    fn client_kill() {
        for n in [1, 2] {
            let mut t = TestServer::new(n);
            setup_addr(&mut t);
            assert_eq!(
                t.run(&["CLIENT", "KILL", "1.2.3.4:5"]),
                "-ERR No such client\r\n"
            );
            assert_eq!(t.run(&["CLIENT", "KILL", "ID", "9"]), ":0\r\n");
            assert_eq!(t.run(&["CLIENT", "KILL", "ID", "1"]), ":0\r\n");
            assert_eq!(
                t.run(&["CLIENT", "KILL", "ID", "x"]),
                "-ERR client-id should be greater than 0\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "ID", "0"]),
                "-ERR client-id should be greater than 0\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "foo", "bar"]),
                "-ERR syntax error\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "ID", "1", "SKIPME"]),
                "-ERR syntax error\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "SKIPME", "maybe"]),
                "-ERR syntax error\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "TYPE", "foo"]),
                "-ERR Unknown client type 'foo'\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "USER", "nobody"]),
                "-ERR No such user 'nobody'\r\n"
            );
            assert_eq!(t.run(&["CLIENT", "KILL", "TYPE", "pubsub"]), ":0\r\n");
            assert_eq!(
                t.run(&["CLIENT", "KILL", "MAXAGE", "x"]),
                "-ERR value is not an integer or out of range\r\n"
            );
            assert_eq!(
                t.run(&["CLIENT", "KILL", "MAXAGE", "0", "SKIPME", "no"]),
                ":0\r\n",
                "a client created in the future is not older than 0s"
            );
            assert!(!t.client.close_after_reply);
            assert_eq!(
                t.run(&["CLIENT", "KILL", "ADDR", "127.0.0.1:5000", "SKIPME", "no"]),
                ":1\r\n"
            );
            assert!(t.client.close_after_reply);
            t.client.close_after_reply = false;
            assert_eq!(
                t.run(&[
                    "CLIENT",
                    "KILL",
                    "LADDR",
                    "127.0.0.1:6379",
                    "USER",
                    "default"
                ]),
                ":0\r\n"
            );
            assert_eq!(t.run(&["CLIENT", "KILL", "127.0.0.1:5000"]), "+OK\r\n");
            assert!(t.client.close_after_reply);
        }
    }

    #[test]
    fn kill_filter_matches() {
        let st = ClientState {
            id: 3,
            addr: "1.1.1.1:1".into(),
            created_ms: 1_000,
            ..Default::default()
        };
        let f = |f: KillFilter| f.matches(&st, 10_000);
        assert!(f(KillFilter::default()));
        assert!(f(KillFilter {
            id: Some(3),
            max_age_s: Some(8),
            ..Default::default()
        }));
        assert!(!f(KillFilter {
            max_age_s: Some(9),
            ..Default::default()
        }));
        assert!(!f(KillFilter {
            typ: Some(ClientType::PubSub),
            ..Default::default()
        }));
        assert!(!f(KillFilter {
            addr: Some(b"1.1.1.1:2".to_vec()),
            ..Default::default()
        }));
    }
}
