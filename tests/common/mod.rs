//! Test harness shared by every integration test in `tests/`.
//!
//! Owns: starting a server process (Tessera or a real `redis-server`) on a
//! free loopback port, waiting until it answers PING, handing out clients
//! (`redis` crate, RESP2 or RESP3) and raw sockets ([`RawConn`]), and killing
//! the process when the [`Server`] is dropped. Also the shard layouts every
//! multi-shard test runs in ([`LAYOUTS`], [`per_layout!`]: 2 and 16 shards,
//! consolidated and not, so a concurrency bug cannot hide behind one
//! thread).
//!
//! Invariants:
//! * Every wait is bounded in time and every loop in count: startup gives up
//!   after [`STARTUP_TIMEOUT`], every socket read after [`READ_TIMEOUT`] (and
//!   a whole reply after [`REPLY_TIMEOUT`]), and no reply may exceed
//!   [`REPLY_MAX_BYTES`]. A broken server fails a test; it never hangs it.
//! * A [`Server`] owns its child process: Drop kills it *and* waits on it, so
//!   no test leaves a zombie or a listener behind. If the thread is
//!   panicking, Drop prints the tail of the server log first, so a failing
//!   test shows what the server said.
//! * Server output (stdout and stderr) goes to `server.log` in a private
//!   temporary directory, which is also the process's working directory (so
//!   a stray `dump.rdb` can never land in the repository).
//!
//! `TESSERA_TEST_BIN` overrides the Tessera binary. Point it at
//! `/usr/bin/redis-server` to validate the tests themselves against Redis:
//! `TESSERA_TEST_BIN=/usr/bin/redis-server cargo test --test protocol`.
//!
//! Why a hand-written RESP reader instead of the `redis` crate for raw
//! tests: a client library normalises what we must check byte for byte
//! (null shapes, doubles, verbatim strings, attributes), and it cannot tell
//! "one reply" from "one reply plus garbage". [`RawConn::read_reply`] returns
//! exactly the bytes of one reply and leaves the rest in its buffer.

// Each integration test binary compiles this module separately and uses only
// part of it; without this every binary warns (and `clippy -D warnings`
// fails) about the helpers that *other* binaries use.
#![allow(dead_code)]

pub mod busy;
pub mod counters;

use std::fs::{self, File};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a server may take from spawn to its first `+PONG`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one blocking socket read (and write).
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on reading one whole reply, however many reads it takes.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest reply [`RawConn::read_reply`] accepts (a bug that streams forever
/// must fail the test, not eat the machine's memory).
pub const REPLY_MAX_BYTES: usize = 256 << 20;
/// Deepest nesting of aggregates the reply reader follows.
pub const REPLY_DEPTH_MAX: usize = 64;
/// Attempts at finding a free port and starting a server on it.
const SPAWN_ATTEMPTS_MAX: u32 = 5;
/// Lines of the server log printed when a test fails.
const LOG_TAIL_LINES: usize = 60;

// ---------------------------------------------------------------- Server

/// Which server a [`Server`] runs; decides the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// The binary under test (`CARGO_BIN_EXE_tessera` or `TESSERA_TEST_BIN`).
    Tessera,
    /// A real `redis-server` from PATH, persistence off (differential tests).
    Redis,
}

/// A server process on a free loopback port; killed and reaped on Drop.
pub struct Server {
    flavor: Flavor,
    port: u16,
    child: Option<Child>,
    dir: PathBuf,
    log_path: PathBuf,
    /// Set when the log was already shown (startup failure), so Drop does
    /// not print it twice.
    log_shown: bool,
}

impl Server {
    /// Starts the Tessera binary with `--port P` followed by `args`.
    ///
    /// The binary is `$TESSERA_TEST_BIN` if set (e.g. `/usr/bin/redis-server`
    /// to validate a test against Redis), else the one Cargo built.
    /// Panics (with the server log) if it does not answer PING within
    /// [`STARTUP_TIMEOUT`].
    pub fn tessera(args: &[&str]) -> Server {
        Server::start(Flavor::Tessera, args)
    }

    /// Starts `redis-server --port P --save "" --appendonly no` followed by
    /// `args`. Panics if `redis-server` is missing; see [`redis_available`].
    pub fn redis(args: &[&str]) -> Server {
        Server::start(Flavor::Redis, args)
    }

    /// Starts a server of the given flavor; see [`Server::tessera`].
    pub fn start(flavor: Flavor, args: &[&str]) -> Server {
        let mut last_failure = String::new();
        for attempt in 1..=SPAWN_ATTEMPTS_MAX {
            // A directory per attempt: a failed attempt's `Server` removes
            // its directory when dropped (a shared one made the next
            // attempt fail to create its log).
            let dir = unique_temp_dir(match flavor {
                Flavor::Tessera => "tessera",
                Flavor::Redis => "redis",
            });
            let log_path = dir.join("server.log");
            let port = free_port();
            let mut server = Server {
                flavor,
                port,
                child: None,
                dir,
                log_path,
                log_shown: false,
            };
            match server.spawn_and_wait(args) {
                Ok(()) => return server,
                Err(SpawnError::PortTaken) => {
                    // Another process grabbed the port between our probe and
                    // the server's bind; pick another one.
                    last_failure = format!("attempt {attempt}: port {port} taken");
                    server.kill();
                }
                Err(SpawnError::Fatal(why)) => {
                    let log = server.log_tail(LOG_TAIL_LINES);
                    server.kill();
                    server.log_shown = true;
                    panic!(
                        "{flavor:?} server failed to start on port {port}: {why}\n\
                         command: {}\n--- server log ({}) ---\n{log}",
                        server.command_line(args).join(" "),
                        server.log_path.display()
                    );
                }
            }
        }
        panic!(
            "{flavor:?} server: no free port after {SPAWN_ATTEMPTS_MAX} attempts ({last_failure})"
        );
    }

    fn binary(&self) -> PathBuf {
        match self.flavor {
            Flavor::Tessera => match std::env::var_os("TESSERA_TEST_BIN") {
                Some(bin) if !bin.is_empty() => PathBuf::from(bin),
                _ => PathBuf::from(env!("CARGO_BIN_EXE_tessera")),
            },
            Flavor::Redis => PathBuf::from("redis-server"),
        }
    }

    fn command_line(&self, args: &[&str]) -> Vec<String> {
        let mut cmd = vec![self.binary().display().to_string()];
        cmd.extend(["--port".to_string(), self.port.to_string()]);
        // A real redis-server standing in for Tessera (TESSERA_TEST_BIN) gets
        // persistence off too, or every FLUSHALL writes an RDB file.
        if self.flavor == Flavor::Redis || testing_real_redis() {
            cmd.extend(
                ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"].map(String::from),
            );
        } else if !args.contains(&"--save") {
            // No snapshot rules unless the test gives its own: with
            // Redis's defaults every FLUSHALL saves (and fsyncs) a dump,
            // as Redis 7.0 does, which cost the differential tests alone
            // 8 s a run; and the redis-server beside it runs without them.
            cmd.extend(["--save", ""].map(String::from));
        }
        cmd.extend(args.iter().map(|a| a.to_string()));
        cmd
    }

    fn spawn_and_wait(&mut self, args: &[&str]) -> Result<(), SpawnError> {
        let argv = self.command_line(args);
        let log = File::create(&self.log_path)
            .map_err(|e| SpawnError::Fatal(format!("create {}: {e}", self.log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| SpawnError::Fatal(e.to_string()))?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| SpawnError::Fatal(format!("spawn {}: {e}", argv[0])))?;
        self.child = Some(child);

        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait() {
                let log = fs::read_to_string(&self.log_path).unwrap_or_default();
                if log.contains("in use") {
                    return Err(SpawnError::PortTaken);
                }
                return Err(SpawnError::Fatal(format!(
                    "exited during startup with {status}"
                )));
            }
            let pid = self.child.as_ref().map(|c| c.id());
            match pid.and_then(|pid| answering_pid(self.port).map(|p| p == pid)) {
                Some(true) => return Ok(()),
                // Someone else owns the port (our bind lost the race; our
                // child is about to exit with EADDRINUSE). Told apart by
                // the process id, not by waiting for our child to exit: on
                // a loaded machine it took longer than any wait, and a
                // test ran against another test's server.
                Some(false) => return Err(SpawnError::PortTaken),
                None => {}
            }
            if Instant::now() >= deadline {
                return Err(SpawnError::Fatal(format!(
                    "no +PONG within {STARTUP_TIMEOUT:?}"
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL: persistence is off and nothing is worth a graceful
            // shutdown here; wait() reaps it so no zombie is left.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's process id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Which server this is.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The TCP port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A `redis` crate client for this server (RESP2).
    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client url")
    }

    /// A `redis` crate client speaking RESP3 (HELLO 3 on connect).
    pub fn client_resp3(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
            .expect("client url")
    }

    /// A connected RESP2 `redis::Connection` with read/write timeouts set.
    pub fn conn(&self) -> redis::Connection {
        bounded_connection(&self.client())
    }

    /// A connected RESP3 `redis::Connection` with read/write timeouts set.
    pub fn conn_resp3(&self) -> redis::Connection {
        bounded_connection(&self.client_resp3())
    }

    /// A raw socket to the server; see [`RawConn`].
    pub fn raw(&self) -> RawConn {
        RawConn::connect(&self.addr())
    }

    /// Path of the file holding the server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole server log so far (empty if unreadable).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// True while the server process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let exited = self.try_wait();
        self.kill();
        if thread::panicking() && !self.log_shown {
            eprintln!(
                "--- {:?} server on port {} ({}){} — last {LOG_TAIL_LINES} log lines ({}) ---\n{}\n--- end of server log ---",
                self.flavor,
                self.port,
                self.binary().display(),
                match exited {
                    Some(status) => format!(" had EXITED with {status}"),
                    None => String::new(),
                },
                self.log_path.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
            // Keep the directory for inspection.
        } else if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

enum SpawnError {
    PortTaken,
    Fatal(String),
}

/// True if `redis-server` is on PATH (differential tests skip otherwise,
/// unless `TESSERA_REQUIRE_REDIS=1`, which CI sets, turns that into a failure).
pub fn redis_available() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !found && std::env::var("TESSERA_REQUIRE_REDIS").is_ok_and(|v| v == "1") {
        panic!("redis-server is not on PATH but TESSERA_REQUIRE_REDIS=1");
    }
    found
}

/// True if the Tessera binary under test is really `redis-server` (tests
/// that check Tessera-only behaviour skip themselves then).
pub fn testing_real_redis() -> bool {
    std::env::var("TESSERA_TEST_BIN").is_ok_and(|b| b.contains("redis-server"))
}

fn bounded_connection(client: &redis::Client) -> redis::Connection {
    let conn = client
        .get_connection_with_timeout(READ_TIMEOUT)
        .expect("connect with the redis crate");
    conn.set_read_timeout(Some(READ_TIMEOUT))
        .expect("set read timeout");
    conn.set_write_timeout(Some(READ_TIMEOUT))
        .expect("set write timeout");
    conn
}

/// A port that was free a moment ago (the kernel picks it for 127.0.0.1:0).
/// Racy by nature: [`Server::start`] retries if the server cannot bind it.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// A port held for a test and never listened on: connecting to it is
/// refused, and no server can take it meanwhile (the socket is bound
/// without SO_REUSEADDR, which every listener here sets). A replica told to
/// replicate from it stays down. A port that was merely free a moment
/// ago ([`free_port`]) can be taken by another test's server, which the
/// replica then reaches: its handshake then counts errors there.
pub struct DeadPort {
    _socket: socket2::Socket,
    pub port: u16,
}

impl DeadPort {
    pub fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
        socket.bind(&any.into()).expect("bind 127.0.0.1:0");
        let port = socket
            .local_addr()
            .expect("local_addr")
            .as_socket()
            .expect("an IP address")
            .port();
        DeadPort {
            _socket: socket,
            port,
        }
    }
}

/// The process id of the server answering `+PONG` on `port` (its `INFO
/// server`'s `process_id`, asked in the same write), over a fresh socket
/// with bounded waits; `None` while nothing answers or it answers PING
/// with an error (`-LOADING` while it loads its data: not ready yet).
fn answering_pid(port: u16) -> Option<u32> {
    let addr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
    s.write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n*1\r\n$4\r\nQUIT\r\n")
        .ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(n)) = reply_len(&buf) {
            if &buf[..n] != b"+PONG\r\n" {
                return None;
            }
            if let Ok(Some(m)) = reply_len(&buf[n..]) {
                let text = String::from_utf8_lossy(&buf[n..n + m]);
                let pid = text
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|v| v.trim().parse().ok());
                // QUIT's +OK, then the server closes the connection: read
                // to its end, so that the probe no longer counts against
                // `maxclients` when the test connects (a test with
                // `--maxclients 2` had its second client refused).
                if buf[n + m..].starts_with(b"+OK\r\n") && read_to_eof(&mut s, deadline) {
                    return pid;
                }
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    None
}

/// Reads `s` until the peer closes it (true) or `deadline` passes.
fn read_to_eof(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut chunk = [0u8; 256];
    while Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

pub fn unique_temp_dir(tag: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "tessera-test-{tag}-{}-{n}-{nanos}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

// ---------------------------------------------------------------- RawConn

/// A raw TCP connection that speaks RESP byte for byte.
///
/// Every read is bounded by [`READ_TIMEOUT`]; a whole reply by
/// [`REPLY_TIMEOUT`]. Bytes read past the end of one reply stay buffered
/// for the next [`RawConn::read_reply`].
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
    reply_timeout: Duration,
}

impl RawConn {
    /// Connects to `addr` (e.g. `"127.0.0.1:6379"`), TCP_NODELAY on.
    pub fn connect(addr: &str) -> RawConn {
        let addr = addr.parse().expect("socket address");
        let stream = TcpStream::connect_timeout(&addr, READ_TIMEOUT).expect("raw connect");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(READ_TIMEOUT))
            .expect("write timeout");
        stream.set_nodelay(true).expect("nodelay");
        RawConn {
            stream,
            buf: Vec::new(),
            reply_timeout: REPLY_TIMEOUT,
        }
    }

    /// Changes the bound on reading one reply (per-read bound follows it,
    /// capped at [`READ_TIMEOUT`]).
    pub fn set_reply_timeout(&mut self, timeout: Duration) {
        self.reply_timeout = timeout;
        let per_read = timeout.min(READ_TIMEOUT).max(Duration::from_millis(1));
        self.stream
            .set_read_timeout(Some(per_read))
            .expect("read timeout");
    }

    /// The underlying stream (for shutdown, peer address, ...).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Writes all of `bytes`; panics on error.
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes)
            .unwrap_or_else(|e| panic!("send {} bytes: {e}", bytes.len()));
    }

    /// Writes all of `bytes`.
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads exactly one complete RESP2/RESP3 reply and returns its raw
    /// bytes. Panics on timeout, EOF, or malformed data.
    pub fn read_reply(&mut self) -> Vec<u8> {
        self.try_read_reply()
            .unwrap_or_else(|e| panic!("read_reply: {e}"))
    }

    /// Like [`RawConn::read_reply`], but returns the failure instead of
    /// panicking (e.g. to see whether the server closed the connection).
    pub fn try_read_reply(&mut self) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + self.reply_timeout;
        loop {
            match reply_len(&self.buf) {
                Ok(Some(n)) => return Ok(self.buf.drain(..n).collect()),
                Ok(None) => {}
                Err(why) => {
                    return Err(io::Error::new(
                        ErrorKind::InvalidData,
                        format!("{why}; buffered: {}", escape(&self.buf, 200)),
                    ))
                }
            }
            if self.buf.len() > REPLY_MAX_BYTES {
                return Err(io::Error::other(format!(
                    "reply larger than {REPLY_MAX_BYTES} bytes"
                )));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "no complete reply within {:?}; buffered: {}",
                        self.reply_timeout,
                        escape(&self.buf, 200)
                    ),
                ));
            }
            let got = match self.fill() {
                // A read's own bound (at most READ_TIMEOUT) is not the
                // reply's: read on until `deadline` (a test that set a
                // longer reply timeout for a long command failed after
                // READ_TIMEOUT).
                Err(e) if e.kind() == ErrorKind::TimedOut && Instant::now() < deadline => continue,
                got => got,
            };
            let got = got.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{e} (no complete reply); buffered: {}",
                        escape(&self.buf, 200)
                    ),
                )
            })?;
            if got == 0 {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("connection closed; buffered: {}", escape(&self.buf, 200)),
                ));
            }
        }
    }

    /// Reads `n` replies.
    pub fn read_replies(&mut self, n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|_| self.read_reply()).collect()
    }

    /// Encodes `args` as a RESP multibulk, sends it, reads one reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(&encode_command(args));
        self.read_reply()
    }

    /// [`RawConn::cmd`] for string arguments.
    pub fn cmd_str(&mut self, args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd(&args)
    }

    /// Asserts that the server closes the connection (EOF or reset) within
    /// [`READ_TIMEOUT`] without sending anything more.
    pub fn read_eof(&mut self) {
        assert!(
            self.buf.is_empty(),
            "expected EOF but bytes are buffered: {}",
            escape(&self.buf, 200)
        );
        match self.wait_closed(READ_TIMEOUT) {
            Ok(()) => {}
            Err(e) => panic!("expected the server to close the connection: {e}"),
        }
    }

    /// Waits until the server closes the connection, discarding nothing:
    /// returns an error if data arrives or the time runs out.
    pub fn wait_closed(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.fill() {
                Ok(0) => return Ok(()),
                Ok(_) => {
                    return Err(io::Error::other(format!(
                        "got data instead of EOF: {}",
                        escape(&self.buf, 200)
                    )))
                }
                Err(e) if is_reset(&e) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("connection still open after {timeout:?}"),
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Asserts nothing arrives within `wait` (for commands with no reply,
    /// e.g. under CLIENT REPLY OFF). Bytes already buffered fail too.
    pub fn assert_silent(&mut self, wait: Duration) {
        if let Some(bytes) = self.poll_bytes(wait) {
            panic!("expected no reply, got: {}", escape(&bytes, 200));
        }
    }

    /// Waits up to `wait` (zero: not at all) for data; returns everything
    /// buffered if any arrived (and leaves it buffered), None if the line
    /// stayed silent.
    pub fn poll_bytes(&mut self, wait: Duration) -> Option<Vec<u8>> {
        if !self.buf.is_empty() {
            return Some(self.buf.clone());
        }
        let got = if wait.is_zero() {
            // Only what the kernel already holds: no waiting at all.
            self.stream.set_nonblocking(true).expect("nonblocking");
            let got = self.fill();
            self.stream.set_nonblocking(false).expect("blocking");
            got
        } else {
            let old = self.stream.read_timeout().ok().flatten();
            self.stream
                .set_read_timeout(Some(wait))
                .expect("read timeout");
            let got = self.fill();
            self.stream.set_read_timeout(old).expect("read timeout");
            got
        };
        match got {
            Ok(n) if n > 0 => Some(self.buf.clone()),
            _ => None,
        }
    }

    /// Bytes received but not yet returned as a reply.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// One bounded read into the buffer; Ok(0) on EOF.
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return Err(io::Error::new(ErrorKind::TimedOut, "read timed out"))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Half-closes the write side (the server sees EOF on its read side).
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

/// True for the errors a peer's close can surface as on Linux.
pub fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

/// Encodes `args` as a RESP multibulk request.
pub fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Length of the first complete RESP2/RESP3 reply in `buf`: Ok(None) if it
/// is still incomplete, Err if it is malformed. An attribute (`|`) is
/// returned together with the reply it annotates. Streamed strings and
/// aggregates (`$?`, `*?`) are not supported.
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, String> {
    parse_one(buf, 0, 0)
}

fn parse_one(buf: &[u8], pos: usize, depth: usize) -> Result<Option<usize>, String> {
    if depth > REPLY_DEPTH_MAX {
        return Err(format!("reply nested deeper than {REPLY_DEPTH_MAX}"));
    }
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(buf, pos + 1) else {
        return Ok(None);
    };
    let line = &buf[pos + 1..line_end];
    let after = line_end + 2;
    match kind {
        b'+' | b'-' | b':' | b',' | b'(' => Ok(Some(after)),
        b'_' => {
            if !line.is_empty() {
                return Err(format!("null with payload {}", escape(line, 40)));
            }
            Ok(Some(after))
        }
        b'#' => match line {
            b"t" | b"f" => Ok(Some(after)),
            _ => Err(format!("bad boolean {}", escape(line, 40))),
        },
        b'$' | b'!' | b'=' => {
            let len = parse_len(line)?;
            if len < 0 {
                if kind == b'$' && len == -1 {
                    return Ok(Some(after)); // RESP2 null bulk
                }
                return Err(format!("bad length {len} for {}", kind as char));
            }
            let end = after + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(format!("bulk of {len} bytes not followed by CRLF"));
            }
            Ok(Some(end + 2))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count = parse_len(line)?;
            if count < 0 {
                if kind == b'*' && count == -1 {
                    return Ok(Some(after)); // RESP2 null array
                }
                return Err(format!("bad count {count} for {}", kind as char));
            }
            let elements = if kind == b'%' || kind == b'|' {
                count * 2
            } else {
                count
            };
            let mut at = after;
            for _ in 0..elements {
                match parse_one(buf, at, depth + 1)? {
                    Some(next) => at = next,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // The attribute annotates the reply that follows it.
                return parse_one(buf, at, depth + 1);
            }
            Ok(Some(at))
        }
        other => Err(format!("unknown RESP type byte {}", escape(&[other], 8))),
    }
}

fn parse_len(line: &[u8]) -> Result<i64, String> {
    let s = std::str::from_utf8(line).map_err(|_| format!("bad length {}", escape(line, 40)))?;
    let n: i64 = s
        .parse()
        .map_err(|_| format!("bad length {}", escape(line, 40)))?;
    if n > REPLY_MAX_BYTES as i64 {
        return Err(format!("length {n} above REPLY_MAX_BYTES"));
    }
    Ok(n)
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

/// Splits an aggregate reply (`*`, `~`, `>`, `%`, `|`-less) into its
/// header byte and the raw bytes of each element. None if `reply` is not an
/// aggregate (or is a null array).
pub fn split_aggregate(reply: &[u8]) -> Option<(u8, Vec<Vec<u8>>)> {
    let kind = *reply.first()?;
    if !matches!(kind, b'*' | b'~' | b'>' | b'%') {
        return None;
    }
    let line_end = find_crlf(reply, 1)?;
    let count = parse_len(&reply[1..line_end]).ok()?;
    if count < 0 {
        return None;
    }
    let elements = if kind == b'%' { count * 2 } else { count };
    let mut at = line_end + 2;
    let mut out = Vec::with_capacity(elements as usize);
    for _ in 0..elements {
        let end = parse_one(reply, at, 1).ok()??;
        out.push(reply[at..end].to_vec());
        at = end;
    }
    Some((kind, out))
}

/// The payload of a simple or bulk string reply (`+`, `$`, `:`, `-`), None
/// for anything else (including nulls).
pub fn reply_payload(reply: &[u8]) -> Option<Vec<u8>> {
    match reply.first()? {
        b'+' | b'-' | b':' | b',' | b'(' => {
            let end = find_crlf(reply, 1)?;
            Some(reply[1..end].to_vec())
        }
        b'$' | b'=' | b'!' => {
            let line_end = find_crlf(reply, 1)?;
            let len = parse_len(&reply[1..line_end]).ok()?;
            if len < 0 {
                return None;
            }
            let start = line_end + 2;
            reply.get(start..start + len as usize).map(|s| s.to_vec())
        }
        _ => None,
    }
}

/// `bytes` as a printable string: `\r`, `\n`, `\t`, `\\`, `\"` escaped, other
/// non-printables as `\xHH`; cut after `max` input bytes with a note.
pub fn escape(bytes: &[u8], max: usize) -> String {
    let mut out = String::with_capacity(bytes.len().min(max) + 2);
    out.push('"');
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    if bytes.len() > max {
        out.push_str(&format!("... ({} bytes)", bytes.len()));
    }
    out
}

/// Asserts `got == want` on raw bytes, printing both escaped on failure.
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8]) {
    if got != want {
        panic!(
            "reply mismatch\n  want: {}\n   got: {}",
            escape(want, 500),
            escape(got, 500)
        );
    }
}

// ---------------------------------------------------------------- PRNG
// Shared by the randomized differential tests.

/// xorshift64* — tiny, seedable, good enough to pick test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so small seeds do not start in a weak state
        // (and 0 is not a fixed point).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// True with probability `pct` percent.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// A data directory (`--dir`) that outlives the servers started on it, so
/// a test can restart a server on the same files. Removed on drop unless
/// the test is failing (kept for inspection).
pub struct DataDir(pub PathBuf);

impl DataDir {
    pub fn new(tag: &str) -> Self {
        DataDir(unique_temp_dir(tag))
    }
    pub fn path(&self) -> &str {
        self.0.to_str().expect("temp dir path is UTF-8")
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// `n` scaled by `TESSERA_STRESS_PCT` (a percentage, default 100), at
/// least 1: the round counts of the concurrent stress tests
/// (`transactions`), so the same tests can soak for longer
/// (`TESSERA_STRESS_PCT=1000`) or be run shorter to measure how many
/// rounds an injected bug needs to show.
pub fn stress(n: usize) -> usize {
    let pct: usize = std::env::var("TESSERA_STRESS_PCT")
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("TESSERA_STRESS_PCT={v:?}: not a number"))
        })
        .unwrap_or(100);
    (n * pct / 100).max(1)
}

/// Polls `f` every 20 ms until it holds; fails the test after 30 s.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// One field of `INFO <section>`, as text.
pub fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .to_string()
}

/// Waits until `n` threads run the server's shards (INFO
/// `shard_threads_active`; shard consolidation moves shards between
/// threads with the load).
pub fn wait_shard_threads(srv: &Server, n: usize) {
    let mut c = srv.conn();
    wait_for(&format!("{n} shard threads"), || {
        info_field(&mut c, "server", "shard_threads_active") == n.to_string()
    });
}

/// `count` key names starting with `prefix`, key `i` on shard `i % shards`
/// by the server's own `shard_of` (a suffix is searched for each), so any
/// `shards` consecutive keys span every shard.
pub fn keys_across_shards(prefix: &str, count: usize, shards: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let want = i % shards;
            (0..10_000)
                .map(|n| format!("{prefix}{i}.{n}"))
                .find(|k| commands::table::shard_of(k.as_bytes(), shards) == want)
                .expect("a key on every shard")
        })
        .collect()
}

/// A key named `prefix<n>` on `shard` of `nshards`.
pub fn key_on(shard: usize, nshards: usize, prefix: &str) -> String {
    (0..10_000)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| commands::table::shard_of(k.as_bytes(), nshards) == shard)
        .expect("a key on the shard")
}

/// Whether `key` (missing) lives on `c`'s home shard: a script with no
/// keys runs there, and inside MULTI/EXEC it cannot run again elsewhere,
/// so an undeclared key of another shard is refused.
pub fn home_has(c: &mut RawConn, key: &str) -> bool {
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    let script = "return redis.pcall('exists', ARGV[1])";
    assert_eq!(c.cmd_str(&["EVAL", script, "0", key]), b"+QUEUED\r\n");
    c.cmd_str(&["EXEC"]) == b"*1\r\n:0\r\n"
}

/// A connection whose home is the shard of `key` (any on Redis). At most
/// 600 tries: with 16 shards, 64 missed one in 60 times.
pub fn connection_on(s: &Server, key: &str) -> RawConn {
    if s.flavor() == Flavor::Redis {
        return s.raw();
    }
    (0..600)
        .map(|_| s.raw())
        .find_map(|mut c| home_has(&mut c, key).then_some(c))
        .expect("no connection landed on the key's shard")
}

/// Redis's `-BUSY` while a script (EVAL) or a function (FCALL) runs past
/// `busy-reply-threshold`.
pub const BUSY_EVAL: &[u8] =
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
pub const BUSY_FUNCTION: &[u8] =
    b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n";

/// Sends PING until the reply is not PONG (a script is busy: PING gets
/// `-BUSY` on every loop then, as in Redis), at most 500 times 10 ms
/// apart; returns that reply. A PING sent before the script is busy waits
/// for it on the script's own loop and then gets `-BUSY`; each PING has
/// the connection's reply timeout, so a loop nobody serves fails here.
pub fn wait_busy(c: &mut RawConn) -> Vec<u8> {
    for _ in 0..500 {
        let r = c.cmd_str(&["PING"]);
        if r != b"+PONG\r\n" {
            return r;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the script never became busy");
}

/// [`connection_on`] with a 10 s reply timeout, for replies that wait
/// for a long script.
pub fn slow_connection_on(s: &Server, key: &str) -> RawConn {
    let mut c = connection_on(s, key);
    c.set_reply_timeout(Duration::from_secs(10));
    c
}

/// Sends a command given as strings without reading its reply (a
/// blocking command, a pipeline).
pub fn send_str(c: &mut RawConn, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.send(&encode_command(&a));
}

/// Waits (at most [`REPLY_TIMEOUT`]) until exactly `n` clients show the
/// blocked flag `b` in CLIENT LIST.
pub fn wait_blocked(ctl: &mut RawConn, n: usize) {
    let start = Instant::now();
    loop {
        let list = ctl.cmd_str(&["CLIENT", "LIST"]);
        let list = String::from_utf8_lossy(&list);
        let blocked = list
            .lines()
            .filter(|l| {
                l.split(' ')
                    .any(|f| f.strip_prefix("flags=").is_some_and(|v| v.contains('b')))
            })
            .count();
        if blocked == n {
            return;
        }
        assert!(
            start.elapsed() < REPLY_TIMEOUT,
            "expected {n} blocked clients, CLIENT LIST:\n{list}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_len_handles_every_resp3_type() {
        let complete: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":-12\r\n",
            b"$3\r\na\r\n\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n$1\r\na\r\n:1\r\n",
            b"_\r\n",
            b"#t\r\n",
            b",1.5\r\n",
            b",inf\r\n",
            b"(123456789012345678901234567890\r\n",
            b"!5\r\nERR x\r\n",
            b"=7\r\ntxt:abc\r\n",
            b"%1\r\n+k\r\n*1\r\n:1\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b">2\r\n+message\r\n+x\r\n",
            b"|1\r\n+ttl\r\n:3\r\n+OK\r\n",
        ];
        for reply in complete {
            let mut buf = reply.to_vec();
            buf.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(
                reply_len(&buf),
                Ok(Some(reply.len())),
                "{}",
                escape(reply, 100)
            );
            for cut in 0..reply.len() {
                assert_eq!(
                    reply_len(&reply[..cut]),
                    Ok(None),
                    "{} cut {cut}",
                    escape(reply, 100)
                );
            }
        }
        assert!(reply_len(b"?x\r\n").is_err());
        assert!(reply_len(b"$1\r\nab\r\n").is_err());
    }
}

// ---------------------------------------------------------------- layouts

/// How a Tessera server lays its shards out on threads: how many shards,
/// and whether idle shards are consolidated onto fewer threads
/// (`shard-consolidation yes`, the default: a shard is adopted by another
/// thread after a short idle window, so a consolidated server runs its
/// shards on one thread once it is quiet and spreads them out under load)
/// or each stays on its own thread (`no`: every multi-shard command
/// crosses threads, so races show).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub shards: usize,
    pub consolidated: bool,
}

/// The layouts every multi-shard integration and differential test runs in
/// (issue 27): 2 and 16 shards, consolidated and not. [`per_layout!`]
/// makes one test per entry.
pub const LAYOUTS: [Layout; 4] = [
    Layout::new(2, true),
    Layout::new(2, false),
    Layout::new(16, true),
    Layout::new(16, false),
];

impl Layout {
    pub const fn new(shards: usize, consolidated: bool) -> Layout {
        Layout {
            shards,
            consolidated,
        }
    }

    /// `shards` shards, each on a thread of its own for good
    /// (`shard-consolidation no`).
    pub const fn apart(shards: usize) -> Layout {
        Layout::new(shards, false)
    }

    /// The command-line arguments that select this layout.
    pub fn args(self) -> Vec<String> {
        let cons = if self.consolidated { "yes" } else { "no" };
        vec![
            "--shards".into(),
            self.shards.to_string(),
            "--shard-consolidation".into(),
            cons.into(),
        ]
    }

    /// Starts Tessera in this layout followed by `extra` arguments. A real
    /// `redis-server` standing in for Tessera (`TESSERA_TEST_BIN`) gets
    /// only `extra` (Redis has no shards).
    pub fn tessera(self, extra: &[&str]) -> Server {
        if testing_real_redis() {
            return Server::tessera(extra);
        }
        let args = self.args();
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend_from_slice(extra);
        Server::tessera(&all)
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.consolidated {
            "consolidated"
        } else {
            "one thread each"
        };
        write!(f, "{} shards, {how}", self.shards)
    }
}

/// Turns each named `fn(Layout)` of the calling test file into one test per
/// entry of [`LAYOUTS`]: `per_layout::NAME::s2`, `::s2_apart`, `::s16`,
/// `::s16_apart` (`cargo test --test list apart` runs the unconsolidated
/// ones). Invoke it where the functions are (usually the file's root).
#[macro_export]
macro_rules! per_layout {
    ($($name:ident),* $(,)?) => {
        mod per_layout {
            $(
                pub mod $name {
                    use $crate::common::LAYOUTS;
                    #[test]
                    fn s2() {
                        super::super::$name(LAYOUTS[0])
                    }
                    #[test]
                    fn s2_apart() {
                        super::super::$name(LAYOUTS[1])
                    }
                    #[test]
                    fn s16() {
                        super::super::$name(LAYOUTS[2])
                    }
                    #[test]
                    fn s16_apart() {
                        super::super::$name(LAYOUTS[3])
                    }
                }
            )*
        }
    };
}
