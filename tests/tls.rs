//! TLS (`tls-port` & co.) and protected mode, end to end.
//!
//! Each test makes its own CA, server and client certificates with rcgen
//! (in a temporary directory), starts Tessera with a plain port (the
//! harness pings it) and a TLS port, and talks TLS through a small rustls
//! client, Debian's `redis-cli --tls` and redis-py `ssl=True`. Where Redis
//! 7.0.15 is installed, its errors (bad certificates at start, a failed
//! CONFIG SET, protected mode's refusal) are compared with Tessera's.
//!
//! Protected mode needs a client address that is not loopback: the test
//! connects to one of this machine's own non-loopback IPv4 addresses (the
//! kernel then uses it as the source too), and skips with a message when
//! the machine has none.

mod common;

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use common::{free_port, redis_available, reply_len, unique_temp_dir, Server, READ_TIMEOUT};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

// ---------------------------------------------------------------- certificates

/// A CA and the certificates it signed, as PEM files in `dir`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// CA `ca`, server `server` (localhost, 127.0.0.1), client `client`,
    /// and a second server pair `server2` for reload tests; `other-ca` and
    /// its `stranger` client are not trusted by the server.
    fn new() -> Pki {
        let dir = unique_temp_dir("tls-pki");
        let (ca, ca_issuer) = make_ca("Tessera test CA");
        write(&dir, "ca.crt", &ca);
        let leaf = |name: &str, cn: &str, issuer: &Issuer<'_, KeyPair>| {
            let key = KeyPair::generate().expect("key");
            let mut p =
                CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                    .expect("params");
            p.distinguished_name.push(DnType::CommonName, cn);
            let cert = p.signed_by(&key, issuer).expect("sign");
            write(&dir, &format!("{name}.crt"), &cert.pem());
            write(&dir, &format!("{name}.key"), &key.serialize_pem());
        };
        leaf("server", "server one", &ca_issuer);
        leaf("server2", "server two", &ca_issuer);
        leaf("client", "client", &ca_issuer);
        let (other, other_issuer) = make_ca("Someone else's CA");
        write(&dir, "other-ca.crt", &other);
        leaf("stranger", "stranger", &other_issuer);
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The server arguments: TLS on `tls_port`, client certificates from
    /// this CA, and `extra`.
    fn args(&self, tls_port: u16, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            self.path("server.crt"),
            "--tls-key-file".into(),
            self.path("server.key"),
            "--tls-ca-cert-file".into(),
            self.path("ca.crt"),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn make_ca(cn: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("ca key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.self_signed(&key).expect("self-sign");
    (cert.pem(), Issuer::new(p, key))
}

fn write(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).expect("write pem");
}

/// Starts Tessera with TLS on a free port; returns it and that port.
fn tls_server(pki: &Pki, extra: &[&str]) -> (Server, u16) {
    let tls_port = free_port();
    let args = pki.args(tls_port, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Server::tessera(&args), tls_port)
}

// ---------------------------------------------------------------- a TLS client

/// A blocking rustls client that speaks RESP.
struct TlsClient {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

/// Which certificate the client presents.
#[derive(Clone, Copy)]
enum Cert<'a> {
    None,
    Named(&'a str),
}

fn client_config(pki: &Pki, trust: &str, cert: Cert<'_>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.path(trust)).expect("ca pem") {
        roots.add(c.expect("ca cert")).expect("add root");
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let cfg = match cert {
        Cert::None => b.with_no_client_auth(),
        Cert::Named(n) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(pki.path(&format!("{n}.crt")))
                    .expect("cert pem")
                    .map(|c| c.expect("cert"))
                    .collect();
            let key = PrivateKeyDer::from_pem_file(pki.path(&format!("{n}.key"))).expect("key");
            b.with_client_auth_cert(chain, key).expect("client auth")
        }
    };
    Arc::new(cfg)
}

impl TlsClient {
    /// Connects and completes the handshake (the error if it fails).
    fn try_connect(port: u16, cfg: Arc<rustls::ClientConfig>) -> io::Result<TlsClient> {
        let tcp = TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(READ_TIMEOUT))?;
        tcp.set_write_timeout(Some(READ_TIMEOUT))?;
        let name = ServerName::try_from("localhost").expect("name");
        let conn = rustls::ClientConnection::new(cfg, name).map_err(io::Error::other)?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Ok(TlsClient {
            tls,
            buf: Vec::new(),
        })
    }

    fn connect(port: u16, cfg: Arc<rustls::ClientConfig>) -> TlsClient {
        Self::try_connect(port, cfg).expect("TLS connect")
    }

    fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        self.tls.write_all(&common::encode_command(args))?;
        self.tls.flush()
    }

    fn read_reply(&mut self) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + common::REPLY_TIMEOUT;
        loop {
            if let Some(n) = reply_len(&self.buf).map_err(io::Error::other)? {
                return Ok(self.buf.drain(..n).collect());
            }
            if Instant::now() > deadline {
                return Err(io::ErrorKind::TimedOut.into());
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.tls.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn cmd(&mut self, args: &[&str]) -> Vec<u8> {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a).expect("send");
        self.read_reply().expect("reply")
    }

    /// The server certificate this connection saw.
    fn peer_cert(&self) -> Vec<u8> {
        self.tls
            .conn
            .peer_certificates()
            .expect("peer certificates")[0]
            .to_vec()
    }
}

/// Whether a client presenting `cert` can run PING (handshake, then a
/// reply: TLS 1.3 reports a refused client certificate only at the first
/// read).
fn can_ping(port: u16, cfg: Arc<rustls::ClientConfig>) -> bool {
    let Ok(mut c) = TlsClient::try_connect(port, cfg) else {
        return false;
    };
    if c.send(&[b"PING"]).is_err() {
        return false;
    }
    matches!(c.read_reply(), Ok(r) if r == b"+PONG\r\n")
}

// ---------------------------------------------------------------- tests

#[test]
fn commands_over_tls_with_a_client_certificate() {
    let pki = Pki::new();
    let (srv, port) = tls_server(&pki, &["--shards", "2", "--shard-consolidation", "no"]);
    let mut c = TlsClient::connect(port, client_config(&pki, "ca.crt", Cert::Named("client")));
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(c.cmd(&["SET", "k", "v"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", "k"]), b"$1\r\nv\r\n");
    // The same data on the plain port.
    let mut plain = srv.raw();
    assert_eq!(plain.cmd_str(&["GET", "k"]), b"$1\r\nv\r\n");
    // Keys on every shard, so some commands hop: the direct-reply path
    // must stay off for TLS (a reply written by another thread would
    // corrupt the record stream).
    for i in 0..200 {
        let k = format!("key:{i}");
        assert_eq!(c.cmd(&["SET", &k, &k]), b"+OK\r\n");
        let want = format!("${}\r\n{k}\r\n", k.len());
        assert_eq!(c.cmd(&["GET", &k]), want.as_bytes());
    }
    assert_eq!(c.cmd(&["QUIT"]), b"+OK\r\n");
}

#[test]
fn a_megabyte_pipelined_round_trips() {
    let pki = Pki::new();
    let (_srv, port) = tls_server(&pki, &["--shards", "2", "--shard-consolidation", "no"]);
    let mut c = TlsClient::connect(port, client_config(&pki, "ca.crt", Cert::Named("client")));
    let big: Vec<u8> = (0..(1 << 20)).map(|i| b'a' + (i % 26) as u8).collect();
    let mut pipeline = Vec::new();
    for i in 0..4 {
        pipeline.extend(common::encode_command(&[
            b"SET",
            format!("big{i}").as_bytes(),
            &big,
        ]));
    }
    for i in 0..4 {
        pipeline.extend(common::encode_command(&[
            b"GET",
            format!("big{i}").as_bytes(),
        ]));
    }
    // One write of ~4 MB: the server reads it in many records.
    c.tls.write_all(&pipeline).expect("write pipeline");
    c.tls.flush().expect("flush");
    for _ in 0..4 {
        assert_eq!(c.read_reply().expect("set reply"), b"+OK\r\n");
    }
    let mut want = format!("${}\r\n", big.len()).into_bytes();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"\r\n");
    for _ in 0..4 {
        assert!(
            c.read_reply().expect("get reply") == want,
            "GET of 1 MB differs"
        );
    }
    assert_eq!(c.cmd(&["DBSIZE"]), b":4\r\n");
}

#[test]
fn tls_auth_clients_yes_no_optional() {
    let pki = Pki::new();
    let with = |n| client_config(&pki, "ca.crt", Cert::Named(n));
    let without = || client_config(&pki, "ca.crt", Cert::None);

    // Default (yes): a certificate from the CA is required.
    let (srv, port) = tls_server(&pki, &[]);
    assert!(can_ping(port, with("client")));
    assert!(!can_ping(port, without()), "no certificate: refused");
    assert!(!can_ping(port, with("stranger")), "unknown CA: refused");
    // Nobody else was affected.
    assert!(can_ping(port, with("client")));
    assert!(srv
        .log()
        .contains("Error accepting a client connection: peer sent no certificates"));
    drop(srv);

    let (_srv, port) = tls_server(&pki, &["--tls-auth-clients", "optional"]);
    assert!(can_ping(port, with("client")));
    assert!(can_ping(port, without()));
    assert!(
        !can_ping(port, with("stranger")),
        "a bad certificate is still refused"
    );

    // `no` needs no CA at all.
    let tls_port = free_port();
    let tp = tls_port.to_string();
    let (cert, key) = (pki.path("server.crt"), pki.path("server.key"));
    let _srv = Server::tessera(&[
        "--tls-port",
        &tp,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    assert!(can_ping(tls_port, without()));
    assert!(can_ping(tls_port, with("client")));
}

/// `tls-port` instead of `port` (port 0), and the CA given as a directory.
#[test]
fn tls_only_with_a_ca_directory() {
    let pki = Pki::new();
    let cas = pki.dir.join("cas");
    fs::create_dir_all(&cas).expect("mkdir");
    fs::copy(pki.path("ca.crt"), cas.join("5ed1a2b3.0")).expect("copy ca");
    fs::write(cas.join("README"), "not a certificate").expect("write");
    let tls_port = free_port();
    let tp = tls_port.to_string();
    let (cert, key) = (pki.path("server.crt"), pki.path("server.key"));
    let dir = cas.display().to_string();
    let log = fs::File::create(pki.dir.join("tls-only.log")).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["--port", "0", "--save", "", "--tls-port", &tp])
        .args([
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-dir",
            &dir,
        ])
        .current_dir(&pki.dir)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn tessera");
    let cfg = client_config(&pki, "ca.crt", Cert::Named("client"));
    let deadline = Instant::now() + common::STARTUP_TIMEOUT;
    let mut up = false;
    while Instant::now() < deadline && !up {
        up = can_ping(tls_port, cfg.clone());
        if !up {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let stranger = can_ping(
        tls_port,
        client_config(&pki, "ca.crt", Cert::Named("stranger")),
    );
    let _ = child.kill();
    let _ = child.wait();
    let log = fs::read_to_string(pki.dir.join("tls-only.log")).unwrap_or_default();
    assert!(up, "no PONG over TLS with port 0:\n{log}");
    assert!(!stranger, "a certificate from another CA must be refused");
    assert!(log.contains("Ready to accept connections tls"), "{log}");
    assert!(!log.contains("Ready to accept connections tcp"), "{log}");
}

#[test]
fn plain_text_on_the_tls_port_is_closed_and_others_go_on() {
    let pki = Pki::new();
    let (srv, port) = tls_server(&pki, &[]);
    let cfg = client_config(&pki, "ca.crt", Cert::Named("client"));
    let mut good = TlsClient::connect(port, cfg.clone());
    assert_eq!(good.cmd(&["SET", "k", "1"]), b"+OK\r\n");
    for garbage in [
        &b"*1\r\n$4\r\nPING\r\n"[..],
        b"PING\r\n",
        b"\x16\x03\x01\x00\x05hello",
        &[0u8; 300][..],
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        let _ = s.write_all(garbage);
        // The server closes: EOF or a reset, perhaps after a TLS alert
        // (content type 21); never a RESP reply, never silence.
        let mut got = Vec::new();
        let r = s.read_to_end(&mut got);
        if let Err(e) = &r {
            assert!(common::is_reset(e), "expected a close, got {e}");
        }
        assert!(
            got.is_empty() || got[0] == 0x15,
            "unexpected bytes {:?}",
            common::escape(&got, 60)
        );
    }
    // A client that connects and sends nothing, then vanishes.
    drop(TcpStream::connect(("127.0.0.1", port)).expect("connect"));
    assert_eq!(good.cmd(&["INCR", "k"]), b":2\r\n");
    let mut again = TlsClient::connect(port, cfg);
    assert_eq!(again.cmd(&["GET", "k"]), b"$1\r\n2\r\n");
    assert_eq!(srv.raw().cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn config_set_of_the_certificate_reloads_the_context() {
    let pki = Pki::new();
    let (srv, port) = tls_server(&pki, &[]);
    let cfg = client_config(&pki, "ca.crt", Cert::Named("client"));
    let server1 = pem_der(&pki.path("server.crt"));
    let server2 = pem_der(&pki.path("server2.crt"));
    let mut old = TlsClient::connect(port, cfg.clone());
    assert_eq!(old.peer_cert(), server1);

    let mut plain = srv.raw();
    let (c2, k2) = (pki.path("server2.crt"), pki.path("server2.key"));
    assert_eq!(
        plain.cmd_str(&["CONFIG", "SET", "tls-cert-file", &c2, "tls-key-file", &k2]),
        b"+OK\r\n"
    );
    assert_eq!(
        plain.cmd_str(&["CONFIG", "GET", "tls-cert-file"]),
        format!("*2\r\n$13\r\ntls-cert-file\r\n${}\r\n{c2}\r\n", c2.len()).as_bytes()
    );
    // New connections get the new certificate; the open one goes on.
    let mut new = TlsClient::connect(port, cfg.clone());
    assert_eq!(new.peer_cert(), server2);
    assert_eq!(new.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(old.cmd(&["PING"]), b"+PONG\r\n");

    // A context that cannot be built fails CONFIG SET and changes nothing.
    let failed = b"-ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - \
                   Unable to update TLS configuration. Check server logs.\r\n";
    assert_eq!(
        plain.cmd_str(&["CONFIG", "SET", "tls-cert-file", "/no/such.crt"]),
        failed
    );
    assert!(srv
        .log()
        .contains("Failed to load certificate: /no/such.crt: No such file or directory"));
    // A key that is not the certificate's.
    let k1 = pki.path("server.key");
    assert_eq!(
        plain.cmd_str(&["CONFIG", "SET", "tls-key-file", &k1]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'tls-key-file') - \
           Unable to update TLS configuration. Check server logs.\r\n"[..]
    );
    assert!(srv.log().contains("key values mismatch"));
    assert_eq!(
        plain.cmd_str(&["CONFIG", "GET", "tls-key-file"]),
        format!("*2\r\n$12\r\ntls-key-file\r\n${}\r\n{k2}\r\n", k2.len()).as_bytes()
    );
    assert_eq!(
        plain.cmd_str(&["CONFIG", "SET", "tls-protocols", "TLSv1.9"]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'tls-protocols') - \
           Unable to update TLS configuration. Check server logs.\r\n"[..]
    );
    assert_eq!(
        plain.cmd_str(&["CONFIG", "SET", "tls-auth-clients", "maybe"]),
        &b"-ERR CONFIG SET failed (possibly related to argument 'tls-auth-clients') - \
           argument(s) must be one of the following: no, yes, optional\r\n"[..]
    );
    assert_eq!(TlsClient::connect(port, cfg.clone()).peer_cert(), server2);
    // Protocols apply to new connections: TLS 1.2 only.
    assert_eq!(
        plain.cmd_str(&["CONFIG", "SET", "tls-protocols", "TLSv1.2"]),
        b"+OK\r\n"
    );
    let c12 = TlsClient::connect(port, cfg);
    assert_eq!(
        c12.tls.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
}

/// The same CONFIG SET failure from Redis 7.0.15, when installed.
#[test]
fn config_set_failure_matches_redis() {
    if !redis_available() {
        eprintln!("SKIPPED: redis-server is not installed");
        return;
    }
    let pki = Pki::new();
    for flavor in [common::Flavor::Redis, common::Flavor::Tessera] {
        let tls_port = free_port();
        let args = pki.args(tls_port, &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let srv = Server::start(flavor, &args);
        let mut c = srv.raw();
        assert_eq!(
            c.cmd_str(&["CONFIG", "SET", "tls-cert-file", "/no/such.crt"]),
            &b"-ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - \
               Unable to update TLS configuration. Check server logs.\r\n"[..],
            "{flavor:?}"
        );
        assert_eq!(
            c.cmd_str(&["CONFIG", "GET", "tls-auth-clients"]),
            b"*2\r\n$16\r\ntls-auth-clients\r\n$3\r\nyes\r\n",
            "{flavor:?}"
        );
    }
}

fn pem_der(path: &str) -> Vec<u8> {
    CertificateDer::from_pem_file(path).expect("pem").to_vec()
}

/// Start-up with a broken TLS setup: Redis's log line, exit status 1.
#[test]
fn bad_certificates_at_start_exit_1_with_redis_reasons() {
    let pki = Pki::new();
    let (crt, key, ca) = (
        pki.path("server.crt"),
        pki.path("server.key"),
        pki.path("ca.crt"),
    );
    let key2 = pki.path("server2.key");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["--tls-cert-file", &crt, "--tls-key-file", &key], {
            "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, \
             tls-replication or tls-auth-clients are enabled!"
                .to_string()
        }),
        (
            vec!["--tls-cert-file", &crt, "--tls-ca-cert-file", &ca],
            "No tls-key-file configured!".to_string(),
        ),
        (
            vec![
                "--tls-cert-file",
                "/nope",
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
            ],
            "Failed to load certificate: /nope: ".to_string(),
        ),
        (
            vec![
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                "/nope",
                "--tls-ca-cert-file",
                &ca,
            ],
            "Failed to load private key: /nope: ".to_string(),
        ),
        (
            vec![
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                &key2,
                "--tls-ca-cert-file",
                &ca,
            ],
            format!("Failed to load private key: {key2}: "),
        ),
        (
            vec![
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-protocols",
                "TLSv1.4",
            ],
            "Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', \
             'TLSv1.2' and 'TLSv1.3'."
                .to_string(),
        ),
        (
            vec![
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-ciphersuites",
                "BOGUS",
            ],
            "Failed to configure ciphersuites: BOGUS".to_string(),
        ),
        (
            vec![
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-ciphers",
                "BOGUS",
            ],
            "Failed to configure ciphers: BOGUS".to_string(),
        ),
    ];
    let redis = redis_available();
    for (args, want) in cases {
        let mut bins = vec![env!("CARGO_BIN_EXE_tessera")];
        if redis {
            bins.push("redis-server");
        }
        for bin in bins {
            let port = free_port().to_string();
            let mut cmd = Command::new(bin);
            cmd.args(["--port", "0", "--tls-port", &port, "--save", ""]);
            let out = cmd.args(&args).output().expect("run server");
            let log = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{bin} {args:?}:\n{log}");
            assert!(
                log.contains(&want),
                "{bin} {args:?}: want {want:?} in\n{log}"
            );
            assert!(
                log.contains("Failed to configure TLS. Check logs for more info."),
                "{bin}: {log}"
            );
        }
    }
}

// ---------------------------------------------------------------- real clients

#[test]
fn redis_cli_over_tls() {
    if Command::new("redis-cli").arg("--version").output().is_err() {
        eprintln!("SKIPPED: redis-cli is not installed");
        return;
    }
    let pki = Pki::new();
    let (_srv, port) = tls_server(&pki, &[]);
    let cli = |args: &[&str]| -> String {
        let p = port.to_string();
        let (ca, crt, key) = (
            pki.path("ca.crt"),
            pki.path("client.crt"),
            pki.path("client.key"),
        );
        let mut a = vec![
            "-p", &p, "--tls", "--cacert", &ca, "--cert", &crt, "--key", &key,
        ];
        a.extend_from_slice(args);
        let out = Command::new("timeout")
            .arg("20")
            .arg("redis-cli")
            .args(&a)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    assert_eq!(cli(&["PING"]), "PONG\n");
    assert_eq!(cli(&["SET", "greeting", "hello tls"]), "OK\n");
    assert_eq!(cli(&["GET", "greeting"]), "hello tls\n");
    // Without a certificate the server refuses it.
    let p = port.to_string();
    let ca = pki.path("ca.crt");
    let out = Command::new("timeout")
        .args([
            "20",
            "redis-cli",
            "-p",
            &p,
            "--tls",
            "--cacert",
            &ca,
            "PING",
        ])
        .output()
        .expect("redis-cli");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PONG"));
}

#[test]
fn redis_py_over_tls() {
    let python = "/usr/bin/python3";
    let ok = Command::new(python)
        .args(["-c", "import redis, ssl"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let required = std::env::var("TESSERA_REQUIRE_REDIS").is_ok_and(|v| v == "1");
        assert!(!required, "redis-py (python3-redis) is not installed");
        eprintln!("SKIPPED: redis-py is not installed");
        return;
    }
    let pki = Pki::new();
    let (_srv, port) = tls_server(&pki, &[]);
    let script = r#"
import sys, redis
port, ca, crt, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
r = redis.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=ca,
                ssl_certfile=crt, ssl_keyfile=key, socket_timeout=10)
assert r.ping()
assert r.set("py", "thon")
assert r.get("py") == b"thon"
p = r.pipeline(transaction=False)
for i in range(100):
    p.set(f"k{i}", "x" * 20000)
    p.get(f"k{i}")
res = p.execute()
assert all(v is True for v in res[0::2]), res[:4]
assert all(v == b"x" * 20000 for v in res[1::2])
print("ok")
"#;
    let out = Command::new("timeout")
        .args(["60", python, "-c", script, &port.to_string()])
        .args([
            pki.path("ca.crt"),
            pki.path("client.crt"),
            pki.path("client.key"),
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "redis-py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------- protected mode

/// One of this machine's IPv4 addresses that is not loopback.
fn non_loopback_ipv4() -> Option<Ipv4Addr> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|&x| x == "inet")?;
            w.next()?.split('/').next()?.parse::<Ipv4Addr>().ok()
        })
        .find(|ip| !ip.is_loopback())
}

const DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is \
enabled and no password is set for the default user. In this mode connections are only accepted \
from the loopback interface. If you want to connect from external computers to Redis you may \
adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG \
SET protected-mode no' from the loopback interface by connecting to Redis from the same host the \
server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. \
Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the \
protected mode by editing the Redis configuration file, and setting the protected mode option to \
'no', and then restarting the server. 3) If you started the server manually just for testing, \
restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the \
default user. NOTE: You only need to do one of the above things in order for the server to start \
accepting connections from the outside.\r\n";

// (sic: "Setup a an" is Redis 7.0.15's text.)

/// What a client at `ip` gets after sending PING: everything until the
/// server closes (or the first reply, if it does not).
fn ping_from(ip: Ipv4Addr, port: u16) -> Vec<u8> {
    let addr = SocketAddr::from((ip, port));
    let mut s = TcpStream::connect_timeout(&addr, READ_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
    assert!(!s.local_addr().expect("local").ip().is_loopback());
    let _ = s.write_all(b"*1\r\n$4\r\nPING\r\n");
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(_) => return got,
        }
        if got.starts_with(b"+") || got.starts_with(b"-NOAUTH") {
            return got;
        }
    }
}

#[test]
fn protected_mode_refuses_outside_clients_as_redis() {
    let Some(ip) = non_loopback_ipv4() else {
        eprintln!("SKIPPED: this machine has no non-loopback IPv4 address");
        return;
    };
    let mut flavors = vec![common::Flavor::Tessera];
    if redis_available() {
        flavors.push(common::Flavor::Redis);
    }
    for &flavor in &flavors {
        // Redis 7.0 does not look at `bind` for protected mode: an address
        // named explicitly is refused as well.
        let both = format!("{ip} 127.0.0.1");
        let srv = Server::start(flavor, &["--bind", &both]);
        assert_eq!(
            String::from_utf8_lossy(&ping_from(ip, srv.port())),
            DENIED,
            "{flavor:?} with an explicit bind"
        );
    }
    for flavor in flavors {
        // Listening everywhere, no password, protected mode by default.
        let srv = Server::start(flavor, &["--bind", "0.0.0.0"]);
        let port = srv.port();
        assert_eq!(
            String::from_utf8_lossy(&ping_from(ip, port)),
            DENIED,
            "{flavor:?}"
        );
        // Loopback is still served.
        assert_eq!(srv.raw().cmd_str(&["PING"]), b"+PONG\r\n");
        assert_eq!(
            common::info_field(&mut srv.conn(), "stats", "rejected_connections"),
            "1",
            "{flavor:?}"
        );
        // A password for the default user lets outside clients in.
        let mut c = srv.raw();
        assert_eq!(
            c.cmd_str(&["CONFIG", "SET", "requirepass", "pw"]),
            b"+OK\r\n"
        );
        assert!(ping_from(ip, port).starts_with(b"-NOAUTH"), "{flavor:?}");
        assert_eq!(c.cmd_str(&["CONFIG", "SET", "requirepass", ""]), b"+OK\r\n");
        assert_eq!(String::from_utf8_lossy(&ping_from(ip, port)), DENIED);
        // So does turning protected mode off.
        assert_eq!(
            c.cmd_str(&["CONFIG", "SET", "protected-mode", "no"]),
            b"+OK\r\n"
        );
        assert_eq!(ping_from(ip, port), b"+PONG\r\n", "{flavor:?}");
    }
}

/// Tessera's default `bind` is Redis 7.0's, `* -::*` (every IPv4 address,
/// and every IPv6 one where the machine has IPv6): protected mode is what
/// keeps outside clients out while the default user has no password.
#[test]
fn by_default_every_address_is_bound_and_protected_mode_guards_it() {
    let Some(ip) = non_loopback_ipv4() else {
        eprintln!("SKIPPED: this machine has no non-loopback IPv4 address");
        return;
    };
    if common::testing_real_redis() {
        eprintln!("SKIPPED: the harness binds a redis-server standing in to 127.0.0.1");
        return;
    }
    let srv = Server::tessera(&[]);
    let port = srv.port();
    let mut c = srv.raw();
    assert_eq!(
        c.cmd_str(&["CONFIG", "GET", "bind"]),
        b"*2\r\n$4\r\nbind\r\n$6\r\n* -::*\r\n"
    );
    assert_eq!(String::from_utf8_lossy(&ping_from(ip, port)), DENIED);
    // IPv6 loopback is bound and served too, where the machine has it.
    if let Ok(mut s) = TcpStream::connect_timeout(
        &SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], port)),
        READ_TIMEOUT,
    ) {
        s.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        s.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
        let mut got = [0u8; 7];
        s.read_exact(&mut got).expect("PONG over ::1");
        assert_eq!(&got, b"+PONG\r\n");
    }
    // With a password the outside is let in (to authenticate).
    assert_eq!(
        c.cmd_str(&["CONFIG", "SET", "requirepass", "pw"]),
        b"+OK\r\n"
    );
    assert!(ping_from(ip, port).starts_with(b"-NOAUTH"));
}

#[test]
fn protected_mode_refusal_goes_over_tls() {
    let Some(ip) = non_loopback_ipv4() else {
        eprintln!("SKIPPED: this machine has no non-loopback IPv4 address");
        return;
    };
    let pki = Pki::new();
    let (_srv, port) = tls_server(&pki, &["--bind", "0.0.0.0", "--tls-auth-clients", "no"]);
    let cfg = client_config(&pki, "ca.crt", Cert::None);
    // The certificate names 127.0.0.1 and localhost: connect to the outside
    // address, verify as localhost.
    let tcp = TcpStream::connect(SocketAddr::from((ip, port))).expect("connect");
    tcp.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
    let conn =
        rustls::ClientConnection::new(cfg.clone(), ServerName::try_from("localhost").unwrap())
            .expect("client");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut got = Vec::new();
    let _ = tls.read_to_end(&mut got);
    assert_eq!(String::from_utf8_lossy(&got), DENIED);
    // Loopback TLS clients are served.
    assert!(can_ping(port, cfg));
}

/// Redis's own `TLS: Working with an encrypted keyfile`, on both servers:
/// a key encrypted by the openssl CLI fails CONFIG SET without
/// `tls-key-file-pass` and loads with it.
#[test]
fn encrypted_key_file_with_its_pass_as_redis() {
    let pki = Pki::new();
    let enc = pki.path("server.key.encrypted");
    let made = Command::new("openssl")
        .args([
            "pkcs8",
            "-topk8",
            "-v2",
            "aes-256-cbc",
            "-passout",
            "pass:1234",
        ])
        .args(["-in", &pki.path("server.key"), "-out", &enc])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("SKIPPED: no openssl CLI to encrypt a key with");
        return;
    }
    let mut flavors = vec![common::Flavor::Tessera];
    if redis_available() {
        flavors.push(common::Flavor::Redis);
    }
    for flavor in flavors {
        let tls_port = free_port();
        let args = pki.args(tls_port, &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let srv = Server::start(flavor, &args);
        let mut c = srv.raw();
        let r = c.cmd_str(&["CONFIG", "SET", "tls-key-file", &enc]);
        assert!(
            String::from_utf8_lossy(&r).contains("Unable to update TLS"),
            "{flavor:?}: {}",
            String::from_utf8_lossy(&r)
        );
        assert_eq!(
            c.cmd_str(&["CONFIG", "SET", "tls-key-file-pass", "1234"]),
            b"+OK\r\n"
        );
        assert_eq!(
            c.cmd_str(&["CONFIG", "SET", "tls-key-file", &enc]),
            b"+OK\r\n",
            "{flavor:?}"
        );
        assert!(can_ping(
            tls_port,
            client_config(&pki, "ca.crt", Cert::Named("client"))
        ));
    }
}

/// CONFIG SET tls-port: TLS turned on at run time, moved, turned off;
/// Redis's errors for a missing certificate and a port in use. Same steps
/// on redis-server when installed.
#[test]
fn config_set_tls_port_as_redis() {
    let pki = Pki::new();
    let mut flavors = vec![common::Flavor::Tessera];
    if redis_available() {
        flavors.push(common::Flavor::Redis);
    }
    let cfg = client_config(&pki, "ca.crt", Cert::Named("client"));
    for flavor in flavors {
        let srv = Server::start(flavor, &[]);
        let mut c = srv.raw();
        let (a, b) = (free_port(), free_port());
        let set_port = |c: &mut common::RawConn, p: u16| {
            c.cmd_str(&["CONFIG", "SET", "tls-port", &p.to_string()])
        };
        assert_eq!(
            set_port(&mut c, a),
            &b"-ERR CONFIG SET failed (possibly related to argument 'tls-port') - \
               Unable to update TLS configuration. Check server logs.\r\n"[..],
            "{flavor:?}"
        );
        let (crt, key, ca) = (
            pki.path("server.crt"),
            pki.path("server.key"),
            pki.path("ca.crt"),
        );
        assert_eq!(
            c.cmd_str(&[
                "CONFIG",
                "SET",
                "tls-cert-file",
                &crt,
                "tls-key-file",
                &key,
                "tls-ca-cert-file",
                &ca,
            ]),
            b"+OK\r\n"
        );
        assert_eq!(set_port(&mut c, a), b"+OK\r\n", "{flavor:?}");
        common::wait_for("TLS on the new port", || can_ping(a, cfg.clone()));
        let mut open = TlsClient::connect(a, cfg.clone());
        // Moved: the old port closes, its connections go on.
        assert_eq!(set_port(&mut c, b), b"+OK\r\n");
        common::wait_for("TLS on the moved port", || can_ping(b, cfg.clone()));
        common::wait_for("the old port closed", || {
            TcpStream::connect(("127.0.0.1", a)).is_err()
        });
        assert_eq!(open.cmd(&["PING"]), b"+PONG\r\n");
        // A port someone else listens on.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        assert_eq!(
            set_port(&mut c, port),
            &b"-ERR CONFIG SET failed (possibly related to argument 'tls-port') - \
               Unable to listen on this port. Check server logs.\r\n"[..],
            "{flavor:?}"
        );
        assert_eq!(
            c.cmd_str(&["CONFIG", "GET", "tls-port"]),
            format!(
                "*2\r\n$8\r\ntls-port\r\n${}\r\n{b}\r\n",
                b.to_string().len()
            )
            .as_bytes()
        );
        assert!(can_ping(b, cfg.clone()));
        assert_eq!(set_port(&mut c, 0), b"+OK\r\n");
        common::wait_for("TLS off", || TcpStream::connect(("127.0.0.1", b)).is_err());
        assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
    }
}
