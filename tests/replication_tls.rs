//! Replication over TLS (issue 25): a replica with `tls-replication yes`
//! connects to its master's TLS port with `tls-cert-file`/`-key-file` as
//! its client certificate and `tls-ca-cert-file` to check the master; the
//! master serves replicas that came in on its TLS port. Both ends are
//! tested against Tessera and redis-server (built with TLS on Debian):
//! the full sync, the stream, and a partial resync after the link is cut.
//! Every wait has a deadline.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{free_port, info_field as field, unique_temp_dir, wait_for, Server};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA and one certificate it signed for localhost / 127.0.0.1 (each
/// server presents it, as server and as client), as PEM files.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = unique_temp_dir("repl-tls-pki");
        let ca_key = KeyPair::generate().expect("ca key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "Tessera test CA");
        let ca = p.self_signed(&ca_key).expect("self-sign");
        let issuer = Issuer::new(p, ca_key);
        write(&dir, "ca.crt", &ca.pem());
        let key = KeyPair::generate().expect("key");
        let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("params");
        p.distinguished_name.push(DnType::CommonName, "server");
        let cert = p.signed_by(&key, &issuer).expect("sign");
        write(&dir, "server.crt", &cert.pem());
        write(&dir, "server.key", &key.serialize_pem());
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// TLS on `tls_port` (0: none), client certificates required, and
    /// `tls-replication` when `replicate`.
    fn args(&self, tls_port: u16, replicate: bool) -> Vec<String> {
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
        if replicate {
            a.extend(["--tls-replication".into(), "yes".into()]);
        }
        a
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).expect("write pem");
}

fn q<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn caught_up(m: &mut redis::Connection, r: &mut redis::Connection) -> bool {
    let off = field(m, "replication", "master_repl_offset");
    field(r, "replication", "master_link_status") == "up"
        && off != "0"
        && field(r, "replication", "master_repl_offset") == off
}

fn start(tessera: bool, args: &[String]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if tessera {
        Server::tessera(&args)
    } else {
        Server::redis(&args)
    }
}

/// A master (TLS port) and a replica (`tls-replication`) of the given
/// kinds: the sync, the stream and a partial resync go over TLS.
fn over_tls(master_tessera: bool, replica_tessera: bool) {
    let pki = Pki::new();
    let tls_port = free_port();
    let mut margs = pki.args(tls_port, false);
    // The sync starts as soon as the replica asks (the default waits 5 s
    // for more replicas: half of each test's time, nothing it checks).
    margs.extend(["--repl-diskless-sync-delay".into(), "0".into()]);
    if master_tessera {
        margs.extend(["--shards".into(), "2".into()]);
    }
    let master = start(master_tessera, &margs);
    let mut rargs = pki.args(0, true);
    rargs.extend([
        "--replicaof".into(),
        "127.0.0.1".into(),
        tls_port.to_string(),
    ]);
    let replica = start(replica_tessera, &rargs);
    let (mut m, mut r) = (master.conn(), replica.conn());
    for i in 0..100 {
        let _: () = q(&mut m, &["SET", &format!("k{i}"), &"x".repeat(i * 10)]);
    }
    // Writes before the sync may leave the master's offset at 0 until its
    // next PING, 10 s apart: one once the link is up moves it.
    wait_for("the replica syncs over TLS", || {
        field(&mut r, "replication", "master_link_status") == "up"
    });
    let _: () = q(&mut m, &["SET", "synced", "1"]);
    wait_for("the replica follows over TLS", || caught_up(&mut m, &mut r));
    for i in 0..50 {
        let _: i64 = q(&mut m, &["INCR", "counter"]);
        let _: i64 = q(&mut m, &["RPUSH", "list", &i.to_string()]);
    }
    wait_for("the stream arrives", || caught_up(&mut m, &mut r));
    let killed: i64 = q(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, 1);
    let _: i64 = q(&mut m, &["INCR", "counter"]);
    // (A Tessera master's offset counts a write a moment after its reply:
    // the wait also looks at the last write.)
    wait_for("a partial resync over TLS", || {
        field(&mut m, "stats", "sync_partial_ok") == "1"
            && caught_up(&mut m, &mut r)
            && q::<Option<String>>(&mut r, &["GET", "counter"]).as_deref() == Some("51")
    });
    assert_eq!(field(&mut m, "stats", "sync_full"), "1");
    let list: Vec<String> = q(&mut r, &["LRANGE", "list", "0", "-1"]);
    assert_eq!(list.len(), 50);
    for i in [0usize, 42, 99] {
        let v: String = q(&mut r, &["GET", &format!("k{i}")]);
        assert_eq!(v.len(), i * 10);
    }
}

fn skip() -> bool {
    if !common::redis_available() {
        eprintln!("skipped: redis-server not found");
        return true;
    }
    common::testing_real_redis()
}

#[test]
fn tessera_master_tessera_replica() {
    if common::testing_real_redis() {
        return;
    }
    over_tls(true, true);
}

#[test]
fn tessera_master_redis_replica() {
    if skip() {
        return;
    }
    over_tls(true, false);
}

#[test]
fn redis_master_tessera_replica() {
    if skip() {
        return;
    }
    over_tls(false, true);
}
