//! Process wiring: listeners, one worker thread per shard, their
//! mailboxes, signals and shutdown.
//!
//! Every worker has its own TCP listener on each bind address
//! (SO_REUSEPORT), so the kernel spreads new connections over threads with
//! no accept lock. A unix socket cannot be shared that way: thread 0
//! accepts on it and hands connections out round-robin through the
//! mailboxes.

pub mod aof;
mod aof_files;
mod aof_manifest;
mod aof_rewrite;
mod blocking;
mod conn;
mod host;
mod mailbox;
pub mod repl;
mod shutdown;
mod tls;
mod worker;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use commands::ServerShared;
use config::Config;
use mio::net::{TcpListener, UnixListener};
use mio::{Poll, Token, Waker};

use crate::log;
use mailbox::Doorbell;

const WAKER_TOKEN: Token = Token(usize::MAX);

/// Listeners bound by CONFIG SET port, one set per worker, until that
/// worker takes them ([`take_listeners`], at its next config refresh).
static HANDOFF: Mutex<Vec<Option<Vec<TcpListener>>>> = Mutex::new(Vec::new());

/// CONFIG SET port or bind (`new_bind`; Redis's updatePort and
/// applyBind): `port` on every `bind` address, one listener per worker
/// each (none for port 0), with CONFIG SET's error. The new listeners are
/// bound before the old ones close (they share the port through
/// SO_REUSEPORT when it is the same: `held`, see [`listen`]).
fn bind_port(
    cfg: &Config,
    threads: usize,
    new_bind: bool,
    held: bool,
) -> Result<Vec<Vec<TcpListener>>, String> {
    listen(cfg, cfg.port, threads, "tcp", held).map_err(|why| {
        log::warning(format_args!("{why}"));
        if new_bind {
            "Failed to bind to specified addresses.".to_string()
        } else {
            "Unable to listen on this port. Check server logs.".to_string()
        }
    })
}

fn hand_over(per: Vec<Vec<TcpListener>>) {
    *HANDOFF.lock().unwrap_or_else(|e| e.into_inner()) = per.into_iter().map(Some).collect();
}

/// The plain listeners CONFIG SET port bound for worker `id`, once (the
/// worker closes its old ones; their accepted connections go on).
fn take_listeners(id: usize) -> Option<Vec<TcpListener>> {
    HANDOFF
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(id)?
        .take()
}

/// One `SO_REUSEPORT` listener per thread on every `bind` address for
/// `port` (none when `port` is 0), as Redis's listenToPort: an optional
/// address (`-` prefix) that cannot be bound is skipped, any other is
/// fatal. `kind` names the port in Redis's error ("tcp", "TLS"). `held`:
/// this server listens on `port` already (CONFIG SET bind), so a new
/// address overlapping an old one (`127.0.0.1` after `*`) must share the
/// port with the old listeners until they close, as Redis, which closes
/// them first, allows: the probe for another process is skipped (see
/// [`bind_all`]).
fn listen(
    cfg: &config::Config,
    port: u16,
    n: usize,
    kind: &str,
    held: bool,
) -> Result<Vec<Vec<TcpListener>>, String> {
    let mut out: Vec<Vec<TcpListener>> = (0..n).map(|_| Vec::new()).collect();
    if port == 0 {
        return Ok(out);
    }
    let failed = || format!("Failed listening on port {port} ({kind}), aborting.");
    for entry in &cfg.bind {
        let (addr, optional) = bind_addr(entry, port)?;
        match bind_all(addr, n, !held) {
            Ok(ls) => {
                for (t, l) in ls.into_iter().enumerate() {
                    out[t].push(l);
                }
            }
            Err(e) if optional => {
                log::notice(format_args!("Skipping optional bind address {entry}: {e}"));
            }
            Err(e) => {
                log::warning(format_args!(
                    "Warning: Could not create server TCP listening socket {}: bind: {}",
                    addr, e
                ));
                return Err(failed());
            }
        }
    }
    if out[0].is_empty() {
        return Err(failed());
    }
    Ok(out)
}

/// Resolves a `bind` entry (`127.0.0.1`, `::1`, `*`, `-::1`) to an address.
/// The `-` prefix marks an address whose absence is not an error.
fn bind_addr(entry: &str, port: u16) -> Result<(SocketAddr, bool), String> {
    let (optional, host) = match entry.strip_prefix('-') {
        Some(h) => (true, h),
        None => (false, entry),
    };
    let host = match host {
        "*" => "0.0.0.0",
        "::*" => "::",
        h => h,
    };
    let addr = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| format!("Invalid bind address '{entry}'"))?;
    Ok((addr, optional))
}

fn listener(addr: SocketAddr, reuseport: bool) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    if reuseport {
        s.set_reuse_port(true)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(511)?;
    Ok(s.into())
}

/// Binds `addr` once per thread. With `probe`, a first bind without
/// SO_REUSEPORT proves nobody else listens there (SO_REUSEPORT would let
/// another process of the same user share the port silently).
fn bind_all(addr: SocketAddr, n: usize, probe: bool) -> std::io::Result<Vec<TcpListener>> {
    if probe {
        drop(listener(addr, false)?);
    }
    (0..n)
        .map(|_| listener(addr, true).map(TcpListener::from_std))
        .collect()
}

fn bind_unix(cfg: &Config) -> Result<Option<UnixListener>, String> {
    let Some(path) = cfg.unixsocket.as_ref() else {
        return Ok(None);
    };
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)
        .map_err(|e| format!("Failed opening Unix socket: {e} (path {})", path.display()))?;
    if cfg.unixsocketperm != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(cfg.unixsocketperm))
            .map_err(|e| format!("Failed setting permissions on Unix socket: {e}"))?;
    }
    Ok(Some(l))
}

/// Runs the server until SHUTDOWN or a signal. `Err` is a start-up failure
/// to report before exiting with status 1.
pub fn run(cfg: Config) -> Result<(), String> {
    // Handlers first: a client can connect as soon as a listener is bound,
    // and a SIGTERM from then on must be a shutdown, not the default
    // disposition (the signals thread picks it up once it runs).
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(|e| format!("signals: {e}"))?;
    // A file past RLIMIT_FSIZE fails its write with EFBIG (handled: see
    // `aof::Aof::commit`) instead of the signal killing the process.
    // SAFETY: setting a signal's disposition to SIG_IGN has no handler to
    // run and no memory to share.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // The call timer's counter (see `commands::clock`): measured for 10 ms
    // on a thread of its own, so start-up does not wait; commands timed
    // before it is done use the monotonic clock.
    let _ = std::thread::Builder::new()
        .name("clock".into())
        .spawn(commands::clock::calibrate);
    let n = match cfg.shards {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let tcp = listen(&cfg, cfg.port, n, "tcp", false)?;
    // Redis builds the TLS context before it listens.
    if let Err(why) = tls::configure(&cfg) {
        log::warning(format_args!("{why}"));
        return Err(tls::START_FAILED.into());
    }
    let tls_tcp = listen(&cfg, cfg.tls_port, n, "TLS", false)?;
    let unix = bind_unix(&cfg)?;
    if tcp[0].is_empty() && tls_tcp[0].is_empty() && unix.is_none() {
        return Err("Configured to not listen anywhere, exiting.".into());
    }

    commands::persist::set_logger(|warning, line| {
        if warning {
            log::warning(format_args!("{line}"));
        } else {
            log::notice(format_args!("{line}"));
        }
    });
    if let Some(d) = &cfg.dir {
        if !d.is_dir() {
            return Err(format!(
                "Can't chdir to '{}': No such file or directory",
                d.display()
            ));
        }
    }
    // With the AOF enabled only the AOF loads (Redis's loadDataFromDisk:
    // an RDB file beside it is ignored, even with no AOF yet), before
    // clients are accepted; then its writer starts. Without, the RDB.
    let mut shards: Option<Vec<engine::Shard>> = None;
    // Keys loaded and expired from an RDB file (or an AOF's RDB base).
    let mut loaded = None;
    // The server's state its scripts share, made first: the RDB file's
    // function libraries are loaded into it (`ServerShared::with_ops`).
    let ops: &'static commands::ops::Ops = commands::ops::Ops::leak(&cfg);
    commands::persist::set_key_load_delay(cfg.key_load_delay);
    let aof = if cfg.appendonly {
        if let Some(l) = aof::load(&cfg, n)? {
            log::notice(format_args!(
                "Done loading AOF, {} commands replayed",
                l.commands
            ));
            shards = Some(l.shards);
            loaded = l.rdb_keys;
            ops.functions.update(|libs| *libs = l.functions);
        }
        // Its writer starts once the server's state (where it publishes
        // its write status) exists.
        Some(aof::open_files(
            &aof::Paths::of(&cfg),
            cfg.aof_use_rdb_preamble,
        )?)
    } else {
        None
    };
    let mut shards = match shards {
        Some(s) => s,
        None => {
            let mut s: Vec<engine::Shard> = (0..n)
                .map(|id| engine::Shard::new(id, cfg.databases))
                .collect();
            if !cfg.appendonly {
                let limits = commands::ctx::enc_limits_of(&cfg);
                // A replica (`replicaof` configured) keeps keys already
                // expired, for its master's DEL (Redis's rdbLoad: only a
                // master skips them).
                let replica =
                    !cfg.replicaof.is_empty() && !cfg.replicaof[0].eq_ignore_ascii_case("no");
                loaded = commands::persist::load_as(&cfg.rdb_path(), &mut s, limits, replica, ops)?
                    .map(|(keys, expired, _)| (keys, expired));
            }
            s
        }
    };
    // What was loaded is what is on disk: no changes to save yet (Redis
    // starts with dirty = 0 after loading).
    for sh in &mut shards {
        for d in &sh.dbs {
            d.dirty.reset();
        }
    }

    let server = ServerShared::with_ops(cfg.clone(), n, ops).share();
    commands::acl::load_at_startup(&server)?;
    // The shard threads' AOF wake-ups, installed once they exist (below).
    let wakers = aof::Wakers::new(n);
    let aof = aof.map(|file| aof::start(file, cfg.appendfsync, (&ops.disk, &wakers)));
    let rewriter = Arc::new(aof_rewrite::Rewriter::new(
        aof::Paths::of(&cfg),
        aof.clone(),
        (&ops.disk, &wakers),
    ));
    let _ = server.aof.set(rewriter.clone());
    repl::init(&server);
    // `min-replicas-to-write` from the start: no replica is good yet
    // (Redis's `repl_good_slaves_count` starts at 0); the cron and the
    // replicas' comings and goings keep it from here.
    let refuse = server
        .repl
        .lock()
        .master
        .too_few_good_replicas(&cfg, engine::now_ms());
    ops.set_refuse_writes(refuse);
    let gate = Arc::new(shutdown::Gate::new(n));
    if let Some((keys, expired)) = loaded {
        server.persist.loaded(keys, expired);
    }
    server
        .tcp_port
        .store(u64::from(cfg.port), std::sync::atomic::Ordering::Relaxed);
    if let [host, port] = cfg.replicaof.as_slice() {
        // INVARIANT-free: the config check admitted only a port in range.
        if let Ok(port) = port.parse::<u16>() {
            commands::replica::set_master(&server, host, port);
        }
    }
    repl::replica::start(server.clone())?;
    let mut polls = Vec::with_capacity(n);
    let mut bells = Vec::with_capacity(n);
    for _ in 0..n {
        let poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
        let waker =
            Waker::new(poll.registry(), WAKER_TOKEN).map_err(|e| format!("eventfd: {e}"))?;
        bells.push(Doorbell::new(waker, n));
        polls.push(poll);
    }
    let bells = Arc::new(bells);
    {
        // A PUBLISH on any thread wakes the subscribers' threads.
        let bells = bells.clone();
        server.pubsub.set_ring(Box::new(move |i| {
            if let Some(b) = bells.get(i) {
                b.ring_if_parked();
            }
        }));
    }
    {
        let shared = server.clone();
        let _ = server.listen_apply.set(Box::new(move |old, new| {
            // Bound first: a port that fails changes nothing. A new `bind`
            // rebinds both ports (Redis's changeBindAddr).
            let plain = (new.port != old.port || new.bind != old.bind)
                .then(|| bind_port(new, n, new.bind != old.bind, new.port == old.port))
                .transpose()?;
            tls::apply(old, new, n)?;
            if let Some(ls) = plain {
                shared
                    .tcp_port
                    .store(u64::from(new.port), Ordering::Relaxed);
                hand_over(ls);
            }
            Ok(())
        }));
    }
    // Scripts holding every shard reach the others' threads (see
    // `worker::reach`).
    let _ = server
        .ops
        .reach
        .set(Box::new(worker::Calls::new(bells.clone(), gate.clone())));
    let all = bells.clone();
    let _ = server.wake_all.set(Box::new(move || {
        for b in all.iter() {
            b.wake();
        }
    }));
    {
        // appendfsync always: the AOF writer wakes threads holding replies.
        let bells = bells.clone();
        wakers.set(move |i| {
            bells[i].wake();
        });
    }

    {
        let server = server.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                // Every signal: a refused shutdown (failed final save)
                // leaves the server running, and the next signal tries
                // again, as in Redis.
                for sig in signals.forever() {
                    let sigint = sig == signal_hook::consts::SIGINT;
                    let name = if sigint { "SIGINT" } else { "SIGTERM" };
                    log::warning(format_args!("Received {name} scheduling shutdown..."));
                    let cfg = server.config();
                    let flags = if sigint {
                        cfg.shutdown_on_sigint
                    } else {
                        cfg.shutdown_on_sigterm
                    };
                    server.shutdown_mode.store(
                        signal_shutdown_mode(flags),
                        std::sync::atomic::Ordering::SeqCst,
                    );
                    server.request_shutdown();
                }
            })
            .map_err(|e| format!("spawn: {e}"))?;
    }

    log::notice(format_args!(
        "Tessera {} (Redis 7.0.15 compatible) starting: port={} shards={} pid={}",
        config::VERSION,
        cfg.port,
        n,
        std::process::id()
    ));
    let hosts = {
        let bells = bells.clone();
        host::Hosts::new(
            n,
            Box::new(move |i| bells[i].wake()),
            server.shard_threads_active.clone(),
        )
    };
    // INVARIANT: the list was checked when the configuration was read.
    let cpus = config::cpulist::parse(&cfg.server_cpulist).unwrap_or_default();
    let mut unix = unix;
    let mut handles = Vec::with_capacity(n);
    for (id, (((poll, mailbox), tcp), shard)) in polls
        .into_iter()
        .zip(mailbox::matrix(bells))
        .zip(tcp.into_iter().zip(tls_tcp))
        .zip(shards)
        .enumerate()
    {
        let server = server.clone();
        let aof = aof.clone();
        let gate = gate.clone();
        let hosts = hosts.clone();
        let unix = if id == 0 { unix.take() } else { None };
        // `server-cpulist`: thread `id` on the list's `id`-th CPU.
        let cpu = (!cpus.is_empty()).then(|| cpus[id % cpus.len()]);
        // Built on its own thread: a worker holds connection state that
        // never crosses threads.
        let h = std::thread::Builder::new()
            .name(format!("shard-{id}"))
            .spawn(move || {
                if let Some(cpu) = cpu {
                    if let Err(e) = host::pin_to_cpu(cpu) {
                        log::warning(format_args!("shard {id}: cannot pin to CPU {cpu}: {e}"));
                    }
                }
                match worker::Worker::new(
                    id,
                    poll,
                    mailbox,
                    server.clone(),
                    tcp,
                    unix,
                    (Some(shard), aof),
                ) {
                    Ok(w) => host::Host::new(w, hosts).run(&gate),
                    Err(e) => {
                        log::warning(format_args!("worker {id}: {e}"));
                        gate.absent();
                        server.request_shutdown();
                    }
                }
            })
            .map_err(|e| format!("spawn: {e}"))?;
        handles.push(h);
    }
    if cfg.port != 0 {
        log::notice(format_args!("Ready to accept connections tcp"));
    }
    if cfg.tls_port != 0 {
        log::notice(format_args!("Ready to accept connections tls"));
    }
    if let Some(p) = &cfg.unixsocket {
        log::notice(format_args!(
            "Ready to accept connections unix ({})",
            p.display()
        ));
    }
    // Every shutdown request gathers the shards here; a refused one
    // (failed final save) hands them back and the server carries on.
    gate.run(&server, &rewriter);
    for h in handles {
        let _ = h.join();
    }
    if let Some(p) = &cfg.unixsocket {
        log::notice(format_args!("Removing the unix socket file."));
        let _ = std::fs::remove_file(p);
    }
    log::warning(format_args!("Tessera is now ready to exit, bye bye..."));
    Ok(())
}

/// The SHUTDOWN mode a signal asks for (`shutdown-on-sigint` /
/// `shutdown-on-sigterm`, Redis's flags): SAVE, NOSAVE and FORCE as the
/// SHUTDOWN command's; NOW has nothing to skip (no replica is waited for).
fn signal_shutdown_mode(flags: u8) -> u8 {
    use commands::ctx::{SHUTDOWN_DEFAULT, SHUTDOWN_FORCE, SHUTDOWN_NOSAVE, SHUTDOWN_SAVE};
    let mut mode = SHUTDOWN_DEFAULT;
    if flags & config::SHUTDOWN_SIG_SAVE != 0 {
        mode |= SHUTDOWN_SAVE;
    }
    if flags & config::SHUTDOWN_SIG_NOSAVE != 0 {
        mode |= SHUTDOWN_NOSAVE;
    }
    if flags & config::SHUTDOWN_SIG_FORCE != 0 {
        mode |= SHUTDOWN_FORCE;
    }
    mode
}
