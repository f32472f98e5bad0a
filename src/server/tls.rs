//! TLS for client connections: the server context built from the `tls-*`
//! directives, and the non-blocking TLS stream a connection reads and
//! writes through on its home thread's event loop.
//!
//! # What it owns
//!
//! * The live context ([`current`]): one `rustls::ServerConfig` shared by
//!   every thread, built at start ([`configure`]) and rebuilt by CONFIG SET
//!   of a `tls-*` directive ([`apply`]), as Redis's `tlsConfigure`; and the
//!   `tls-port` listeners CONFIG SET binds, handed to the workers. A new
//!   context applies to connections accepted after it; open ones keep the
//!   one they shook hands with (Redis's behaviour too).
//! * [`TlsStream`]: rustls's sans-I/O state machine over a non-blocking
//!   socket, with the read/write contract `conn::Stream` callers already
//!   rely on (a short read means the socket is drained; `WouldBlock` means
//!   wait for the next event).
//!
//! # Invariants
//!
//! * A write that returns `Ok(n)` has put the records of those `n` bytes on
//!   the socket. When the socket takes only part of the records, the write
//!   returns `WouldBlock` and remembers the `n` bytes it encrypted; the
//!   caller retries with the same bytes (OpenSSL's `SSL_write` contract),
//!   and the retry reports them once the records are out. So a connection's
//!   "everything written" (close after QUIT, after an error) still means the
//!   bytes left the process.
//! * No plaintext is accepted before the handshake completes: nothing could
//!   be sent, and `Ok` would be a lie.
//! * Bounded: one write encrypts at most [`WRITE_CHUNK`] bytes; rustls
//!   holds at most its default 64 KiB of records unsent and its default
//!   16 KiB of received plaintext (a read drains plaintext before it reads
//!   the socket again). Certificate files are read up to [`PEM_MAX_BYTES`].
//! * A TLS stream never grants another thread a direct reply
//!   (`Stream::direct_reply`): records carry sequence numbers and a MAC
//!   that only this side's state can produce.
//!
//! # Why rustls, sans-I/O
//!
//! The event loop is our own (mio, edge-triggered), so the TLS layer must
//! not own I/O or a runtime: rustls's `read_tls`/`process_new_packets`/
//! `write_tls` fit it directly, where tokio-rustls or openssl's blocking
//! streams would not. The `ring` provider builds from the crate alone
//! (aws-lc-rs, rustls's default, needs cmake and minutes of C).
//!
//! # Deliberate differences from Redis 7.0 (OpenSSL)
//!
//! * TLSv1 and TLSv1.1 do not exist in rustls: `tls-protocols` naming only
//!   them fails; named beside TLSv1.2/1.3 they are ignored with a warning.
//! * `tls-ciphers` (TLS 1.2) understands OpenSSL's names of the suites
//!   rustls has (ECDHE with AES-GCM or ChaCha20-Poly1305) and the keywords
//!   `DEFAULT`, `ALL`, `HIGH`, `ECDHE`, `EECDH`, `AESGCM`, `CHACHA20`,
//!   `TLSv1.2`; `!`, `-`, `+` and `@` terms are accepted and not applied.
//!   A list that selects no suite fails as in Redis. OpenSSL's other TLS
//!   1.2 suites (RSA key exchange, CBC: `AES128-SHA256`...) do not exist
//!   in rustls, so a client offering only those is refused.
//! * Client certificates are checked by webpki: X.509 v1 certificates
//!   (`openssl x509 -req` without extensions) are refused, where OpenSSL
//!   takes them. The server's own v1 certificate is served.
//! * Plain text or garbage on the TLS port gets a TLS alert, then the close
//!   (Redis's OpenSSL closes without one; either way the client sees the
//!   connection end and nobody else is affected).
//! * `tls-key-file-pass` decrypts PKCS#8 keys (`ENCRYPTED PRIVATE KEY`,
//!   OpenSSL 3's output); OpenSSL's legacy encrypted PEM (`Proc-Type: 4,
//!   ENCRYPTED`) is refused with a clear error.
//! * `tls-ca-cert-dir` is read whole when the context is built (every
//!   file holding certificates counts, whatever its name); a directory
//!   that is missing, or a CA setting that yields no certificate, fails
//!   then (OpenSSL looks certificates up lazily, so Redis starts and
//!   refuses every client instead).
//! * `tls-dh-params-file` is kept but unused (rustls has no finite-field
//!   DH); `tls-session-cache-timeout` is not applied (rustls's cache is by
//!   count); `tls-session-cache-size 0` (OpenSSL: no limit) is
//!   [`SESSION_CACHE_MAX`] sessions.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use config::{Config, TlsAuthClients};
use rustls::crypto::{ring as provider, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{
    ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection,
    SupportedCipherSuite,
};

/// Most plaintext bytes one write encrypts (four full records).
const WRITE_CHUNK: usize = 64 * 1024;
/// Largest certificate, key or CA file read.
const PEM_MAX_BYTES: u64 = 4 << 20;
/// Most TLS sessions cached for resumption (`tls-session-cache-size` 0,
/// OpenSSL's "unlimited", and anything larger): rustls allocates the
/// cache's table at its full size up front.
const SESSION_CACHE_MAX: usize = 1 << 16;
/// Most files read from `tls-ca-cert-dir`.
const CA_DIR_FILES_MAX: usize = 4096;

/// Redis's start-up failure line, after the reason was logged.
pub const START_FAILED: &str = "Failed to configure TLS. Check logs for more info.";

/// Redis's CONFIG SET failure reasons.
const SET_FAILED: &str = "Unable to update TLS configuration. Check server logs.";
const LISTEN_FAILED: &str = "Unable to listen on this port. Check server logs.";

static CONTEXT: RwLock<Option<Arc<ServerConfig>>> = RwLock::new(None);

/// Listeners bound by CONFIG SET tls-port, one set per worker, until that
/// worker takes them ([`take_listeners`], at its next config refresh).
static HANDOFF: Mutex<Vec<Option<Vec<mio::net::TcpListener>>>> = Mutex::new(Vec::new());

/// The context new TLS connections use; `None` until one was built.
pub fn current() -> Option<Arc<ServerConfig>> {
    CONTEXT.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// At start: builds the context if `cfg` wants TLS (Redis's rule, see
/// `Config::tls_wanted`). `Err`: the log line saying why.
pub fn configure(cfg: &Config) -> Result<(), String> {
    if !cfg.tls_wanted() {
        return Ok(());
    }
    let ctx = build(cfg)?;
    *CONTEXT.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(ctx));
    Ok(())
}

/// CONFIG SET of `tls-*` directives, from `old` to `new` (Redis's
/// applyTlsCfg and applyTLSPort): rebuilds the context when TLS is wanted
/// and its settings (or the wish) changed, and binds a changed `tls-port`
/// (or `tls-port` after a changed `bind`) on every bind address, once per worker (`threads`); each worker swaps
/// its listeners at its next config refresh. `Err`: Redis's reason; the
/// details are logged, and nothing changed.
pub fn apply(old: &Config, new: &Config, threads: usize) -> Result<(), String> {
    if new.tls_wanted() && (new.tls_context_differs(old) || !old.tls_wanted()) {
        let ctx = build(new).map_err(|why| {
            crate::log::warning(format_args!("{why}"));
            SET_FAILED.to_string()
        })?;
        if new.tls_port != old.tls_port || new.bind != old.bind {
            // Bound first: a port that fails keeps the old context too.
            let ls = bind_tls(new, threads, new.tls_port == old.tls_port)?;
            *CONTEXT.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(ctx));
            hand_over(ls);
            return Ok(());
        }
        *CONTEXT.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(ctx));
    } else if new.tls_port != old.tls_port || new.bind != old.bind {
        hand_over(bind_tls(new, threads, new.tls_port == old.tls_port)?);
    }
    Ok(())
}

/// `tls-port` on every `bind` address, one listener per worker each
/// (none for port 0): the start's `listen`, with CONFIG SET's error.
/// `held`: the port is this server's already (see `listen`).
fn bind_tls(
    cfg: &Config,
    threads: usize,
    held: bool,
) -> Result<Vec<Vec<mio::net::TcpListener>>, String> {
    super::listen(cfg, cfg.tls_port, threads, "TLS", held).map_err(|why| {
        crate::log::warning(format_args!("{why}"));
        LISTEN_FAILED.to_string()
    })
}

fn hand_over(per: Vec<Vec<mio::net::TcpListener>>) {
    *HANDOFF.lock().unwrap_or_else(|e| e.into_inner()) = per.into_iter().map(Some).collect();
}

/// The TLS listeners CONFIG SET tls-port bound for worker `id`, once.
pub fn take_listeners(id: usize) -> Option<Vec<mio::net::TcpListener>> {
    HANDOFF
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(id)?
        .take()
}

/// Redis's `tlsConfigure` + `createSSLContext`, in their order of checks
/// (so the first complaint is the one Redis logs).
pub fn build(cfg: &Config) -> Result<ServerConfig, String> {
    let Some(cert_file) = &cfg.tls_cert_file else {
        return Err("No tls-cert-file configured!".into());
    };
    let Some(key_file) = &cfg.tls_key_file else {
        return Err("No tls-key-file configured!".into());
    };
    let auth = cfg.tls_auth_clients;
    let has_ca = cfg.tls_ca_cert_file.is_some() || cfg.tls_ca_cert_dir.is_some();
    if (auth != TlsAuthClients::No || cfg.tls_cluster || cfg.tls_replication) && !has_ca {
        return Err(
            "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when \
                    tls-cluster, tls-replication or tls-auth-clients are enabled!"
                .into(),
        );
    }
    let versions = protocols(cfg.tls_protocols.as_deref())?;
    let certs = load_certs(cert_file)
        .map_err(|e| format!("Failed to load certificate: {}: {e}", cert_file.display()))?;
    let key = load_key(key_file, cfg.tls_key_file_pass.as_deref())
        .map_err(|e| format!("Failed to load private key: {}: {e}", key_file.display()))?;
    let roots = if has_ca { Some(load_roots(cfg)?) } else { None };
    let suites = cipher_suites(cfg)?;
    let base = provider::default_provider();
    let p = Arc::new(CryptoProvider {
        cipher_suites: suites,
        ..base
    });
    let builder = ServerConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("Failed to configure ciphers: {e}"))?;
    let builder = match (auth, roots) {
        (TlsAuthClients::No, _) | (_, None) => builder.with_no_client_auth(),
        (a, Some(roots)) => {
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), p.clone());
            let v = if a == TlsAuthClients::Optional {
                v.allow_unauthenticated()
            } else {
                v
            };
            let v = v.build().map_err(|e| {
                format!("Failed to configure CA certificate(s) file/directory: {e}")
            })?;
            builder.with_client_cert_verifier(v)
        }
    };
    // OpenSSL's check that the key is the certificate's. A certificate
    // webpki cannot parse (an X.509 v1 one, as `openssl x509 -req` makes
    // without extensions) is still served, as OpenSSL serves it.
    let key_fail =
        |why: String| format!("Failed to load private key: {}: {why}", key_file.display());
    let signer = p
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_fail(e.to_string()))?;
    let ck = rustls::sign::CertifiedKey::new(certs, signer);
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        ck.keys_match()
    {
        return Err(key_fail("key values mismatch".into()));
    }
    let mut sc = builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck)));
    sc.ignore_client_order = cfg.tls_prefer_server_ciphers;
    sc.session_storage = if cfg.tls_session_caching {
        // OpenSSL reads a size of 0 as "unlimited": here, the bound.
        let size = match cfg.tls_session_cache_size as usize {
            0 => SESSION_CACHE_MAX,
            n => n.min(SESSION_CACHE_MAX),
        };
        ServerSessionMemoryCache::new(size)
    } else {
        Arc::new(NoServerSessionStorage {})
    };
    Ok(sc)
}

/// `tls-protocols`: Redis's `parseProtocolsConfig` (case-insensitive words;
/// none given: TLSv1.2 and TLSv1.3).
fn protocols(v: Option<&[u8]>) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let words: Vec<&[u8]> = v
        .unwrap_or_default()
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    }
    let (mut v12, mut v13, mut old) = (false, false, false);
    for w in words {
        let is = |n: &str| w.eq_ignore_ascii_case(n.as_bytes());
        if is("tlsv1") || is("tlsv1.1") {
            old = true;
        } else if is("tlsv1.2") {
            v12 = true;
        } else if is("tlsv1.3") {
            v13 = true;
        } else {
            return Err(
                "Invalid tls-protocols specified. Use a combination of 'TLSv1', \
                        'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'."
                    .into(),
            );
        }
    }
    if !v12 && !v13 {
        return Err(
            "Invalid tls-protocols specified: TLSv1 and TLSv1.1 are not supported, \
                    use 'TLSv1.2' and/or 'TLSv1.3'."
                .into(),
        );
    }
    if old {
        crate::log::warning(format_args!(
            "tls-protocols: TLSv1 and TLSv1.1 are not supported and were ignored"
        ));
    }
    let mut out = Vec::with_capacity(2);
    if v13 {
        out.push(&rustls::version::TLS13);
    }
    if v12 {
        out.push(&rustls::version::TLS12);
    }
    Ok(out)
}

/// OpenSSL's names for the TLS 1.2 suites rustls has, and rustls's.
const TLS12_NAMES: &[(&str, SupportedCipherSuite)] = &[
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// TLS 1.3 suites by their OpenSSL (= IANA) names.
const TLS13_NAMES: &[(&str, SupportedCipherSuite)] = &[
    (
        "TLS_AES_256_GCM_SHA384",
        provider::cipher_suite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_AES_128_GCM_SHA256",
        provider::cipher_suite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// OpenSSL cipher-list keywords that select every TLS 1.2 suite we have.
const TLS12_KEYWORDS: &[&str] = &[
    "DEFAULT", "ALL", "HIGH", "ECDHE", "EECDH", "AESGCM", "CHACHA20", "TLSv1.2", "kECDHE", "aRSA",
    "aECDSA", "AES", "SECURE",
];

/// The suites `tls-ciphers` (TLS 1.2) and `tls-ciphersuites` (TLS 1.3)
/// select, in the order given; unset: rustls's defaults for that version.
fn cipher_suites(cfg: &Config) -> Result<Vec<SupportedCipherSuite>, String> {
    let split = |v: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(v)
            .split([':', ',', ' '])
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    match &cfg.tls_ciphersuites {
        None => out.extend(TLS13_NAMES.iter().map(|&(_, s)| s)),
        Some(v) => {
            let before = out.len();
            for w in split(v) {
                match TLS13_NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(&w)) {
                    Some(&(_, s)) if !out.contains(&s) => out.push(s),
                    Some(_) => {}
                    // OpenSSL's SSL_CTX_set_ciphersuites fails on an
                    // unknown name.
                    None => {
                        return Err(format!(
                            "Failed to configure ciphersuites: {}",
                            String::from_utf8_lossy(v)
                        ))
                    }
                }
            }
            if out.len() == before {
                return Err(format!(
                    "Failed to configure ciphersuites: {}",
                    String::from_utf8_lossy(v)
                ));
            }
        }
    }
    match &cfg.tls_ciphers {
        None => out.extend(TLS12_NAMES.iter().map(|&(_, s)| s)),
        Some(v) => {
            let mut any = false;
            for w in split(v) {
                if w.starts_with(['!', '-', '+', '@']) {
                    continue;
                }
                if TLS12_KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(&w)) {
                    for &(_, s) in TLS12_NAMES {
                        if !out.contains(&s) {
                            out.push(s);
                        }
                    }
                    any = true;
                } else if let Some(&(_, s)) =
                    TLS12_NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(&w))
                {
                    if !out.contains(&s) {
                        out.push(s);
                    }
                    any = true;
                }
                // OpenSSL's SSL_CTX_set_cipher_list skips names it does
                // not know and fails only when nothing is left.
            }
            if !any {
                return Err(format!(
                    "Failed to configure ciphers: {}",
                    String::from_utf8_lossy(v)
                ));
            }
        }
    }
    Ok(out)
}

/// Reads a PEM file, bounded.
fn read_pem(path: &Path) -> io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    f.take(PEM_MAX_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > PEM_MAX_BYTES {
        return Err(io::Error::other("file too large"));
    }
    Ok(buf)
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path).map_err(io_why)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificate found".into());
    }
    Ok(certs)
}

/// A PEM private key (PKCS#1, SEC1 or PKCS#8). An encrypted PKCS#8 key
/// (`ENCRYPTED PRIVATE KEY`, what OpenSSL 3 writes for `openssl rsa
/// -aes256`) is decrypted with `pass` (PBES2: PBKDF2 or scrypt, AES-CBC).
fn load_key(path: &Path, pass: Option<&[u8]>) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_pem(path).map_err(io_why)?;
    let has = |s: &[u8]| pem.windows(s.len()).any(|w| w == s);
    if has(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        let Some(pass) = pass else {
            return Err("the private key is encrypted and tls-key-file-pass is not set".into());
        };
        let text = std::str::from_utf8(&pem).map_err(|_| "not a PEM file".to_string())?;
        let (_, doc) = pkcs8::SecretDocument::from_pem(text).map_err(|e| e.to_string())?;
        let info =
            pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes()).map_err(|e| e.to_string())?;
        let plain = info.decrypt(pass).map_err(|_| "bad decrypt".to_string())?;
        return Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()));
    }
    if has(b"Proc-Type: 4,ENCRYPTED") {
        // OpenSSL's legacy encryption (MD5-derived key): not supported.
        return Err(
            "keys encrypted in OpenSSL's legacy PEM format are not supported: \
                    convert it (openssl pkcs8 -topk8 -in KEY -out NEW)"
                .into(),
        );
    }
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| e.to_string())
}

fn load_roots(cfg: &Config) -> Result<RootCertStore, String> {
    let fail = |e: String| format!("Failed to configure CA certificate(s) file/directory: {e}");
    let mut roots = RootCertStore::empty();
    if let Some(f) = &cfg.tls_ca_cert_file {
        for c in load_certs(f).map_err(fail)? {
            roots.add(c).map_err(|e| fail(e.to_string()))?;
        }
    }
    if let Some(d) = &cfg.tls_ca_cert_dir {
        // OpenSSL looks certificates up by hashed names (c_rehash); every
        // readable certificate in the directory is the same set.
        let rd = std::fs::read_dir(d).map_err(|e| fail(io_why(e)))?;
        for ent in rd.flatten().take(CA_DIR_FILES_MAX) {
            let p = ent.path();
            if !p.is_file() {
                continue;
            }
            if let Ok(certs) = load_certs(&p) {
                for c in certs {
                    let _ = roots.add(c);
                }
            }
        }
    }
    if roots.is_empty() {
        return Err(fail("no CA certificate found".into()));
    }
    Ok(roots)
}

/// The context the server connects out with (`tls-replication`: a
/// replica to its master): `tls-client-cert-file`/`-key-file` if set,
/// else the server's own pair (Redis's rule), and the CAs of
/// `tls-ca-cert-file`/`-dir` to verify the peer. Unlike OpenSSL as Redis
/// sets it up, rustls also checks that the peer's certificate names the
/// host (or IP address) connected to.
pub fn client_config(cfg: &Config) -> Result<Arc<ClientConfig>, String> {
    let versions = protocols(cfg.tls_protocols.as_deref())?;
    let base = provider::default_provider();
    let p = Arc::new(CryptoProvider {
        cipher_suites: cipher_suites(cfg)?,
        ..base
    });
    let roots = load_roots(cfg)?;
    let b = ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("Failed to configure ciphers: {e}"))?
        .with_root_certificates(roots);
    let (cert, key, pass) = match (&cfg.tls_client_cert_file, &cfg.tls_client_key_file) {
        (Some(c), Some(k)) => (Some(c), Some(k), &cfg.tls_client_key_file_pass),
        _ => (
            cfg.tls_cert_file.as_ref(),
            cfg.tls_key_file.as_ref(),
            &cfg.tls_key_file_pass,
        ),
    };
    let cc = match (cert, key) {
        (Some(c), Some(k)) => {
            let certs = load_certs(c)
                .map_err(|e| format!("Failed to load certificate: {}: {e}", c.display()))?;
            let key = load_key(k, pass.as_deref())
                .map_err(|e| format!("Failed to load private key: {}: {e}", k.display()))?;
            b.with_client_auth_cert(certs, key)
                .map_err(|e| format!("Failed to load private key: {}: {e}", k.display()))?
        }
        _ => b.with_no_client_auth(),
    };
    Ok(Arc::new(cc))
}

/// An I/O error as OpenSSL's reason text ("No such file or directory").
fn io_why(e: io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

// ---------------------------------------------------------------- stream

/// A TLS connection over a non-blocking TCP socket: a client's on the
/// TLS port, or one the server opened ([`TlsStream::client`]).
pub struct TlsStream {
    pub tcp: mio::net::TcpStream,
    conn: Connection,
    /// Plaintext bytes the last write encrypted whose records are not all
    /// on the socket yet (see the module invariants).
    held: usize,
    /// Sent as soon as the handshake completes, then the connection ends
    /// (protected mode's refusal, which Redis sends after the handshake).
    refusal: Option<&'static [u8]>,
}

impl TlsStream {
    pub fn new(tcp: mio::net::TcpStream, ctx: Arc<ServerConfig>) -> io::Result<Self> {
        let conn = ServerConnection::new(ctx).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            conn: conn.into(),
            held: 0,
            refusal: None,
        })
    }

    /// The client side, to `host` (a name or an IP address).
    #[allow(dead_code)] // For the replication link (issue 25).
    pub fn client(
        tcp: mio::net::TcpStream,
        ctx: Arc<ClientConfig>,
        host: &str,
    ) -> io::Result<Self> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = ClientConnection::new(ctx, name).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            conn: conn.into(),
            held: 0,
            refusal: None,
        })
    }

    /// A client session that shook hands elsewhere (the replication
    /// link's handshake thread) goes on over `tcp`, now non-blocking.
    pub fn from_client(tcp: mio::net::TcpStream, conn: ClientConnection) -> Self {
        TlsStream {
            tcp,
            conn: conn.into(),
            held: 0,
            refusal: None,
        }
    }

    /// Ends the connection with `msg` once the handshake is done.
    pub fn refuse_after_handshake(&mut self, msg: &'static [u8]) {
        self.refusal = Some(msg);
    }

    /// Fills `buf` with plaintext until the socket is drained (then a
    /// short count, or `WouldBlock` when nothing came), the buffer is full,
    /// or the peer closed (`Ok(0)` once nothing is left).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        loop {
            if got == buf.len() {
                return Ok(got);
            }
            match self.conn.reader().read(&mut buf[got..]) {
                Ok(0) => return Ok(got),
                Ok(n) => {
                    got += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(got),
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => {
                    // EOF: what rustls still holds is read by the next turn.
                    if self.conn.is_handshaking() {
                        return Ok(got);
                    }
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if got > 0 { Ok(got) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = self.conn.process_new_packets() {
                // Plain text or garbage on the TLS port, a refused
                // certificate: send the alert rustls queued, then the
                // caller closes (Redis logs it alike).
                crate::log::warning(format_args!(
                    "Error accepting a client connection: {e} (conn: fd={})",
                    std::os::fd::AsRawFd::as_raw_fd(&self.tcp)
                ));
                let _ = self.push();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Handshake messages, alerts, session tickets.
            self.push()?;
            if let Some(msg) = self.refusal.filter(|_| !self.conn.is_handshaking()) {
                self.refusal = None;
                let _ = self.conn.writer().write_all(msg);
                self.conn.send_close_notify();
                let _ = self.push();
                return Err(io::ErrorKind::ConnectionRefused.into());
            }
        }
    }

    /// Encrypts and sends up to [`WRITE_CHUNK`] bytes of `buf`; see the
    /// module invariants for the retry contract.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push()?;
        if self.conn.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if self.held > 0 {
            let n = std::mem::take(&mut self.held);
            debug_assert!(n <= buf.len(), "a retried TLS write offers the same bytes");
            return Ok(n.min(buf.len()));
        }
        if self.conn.is_handshaking() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self
            .conn
            .writer()
            .write(&buf[..buf.len().min(WRITE_CHUNK)])?;
        self.push()?;
        if self.conn.wants_write() {
            self.held = n;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Sends queued records until done or the socket is full.
    pub fn push(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA, and a certificate for localhost/127.0.0.1 it signed, as
    /// PEM files in a fresh directory.
    fn pki() -> std::path::PathBuf {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = std::env::temp_dir().join(format!(
            "tessera-tls-unit-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
        std::fs::write(dir.join("s.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("s.key"), key.serialize_pem()).unwrap();
        dir
    }

    /// The direct-reply path is a capability of the stream: a plain TCP
    /// stream grants it, a TLS stream over the same kind of socket
    /// declines (another thread cannot make its records).
    #[test]
    fn a_tls_stream_declines_direct_replies() {
        let dir = pki();
        let cfg = Config {
            tls_port: 1,
            tls_cert_file: Some(dir.join("s.crt")),
            tls_key_file: Some(dir.join("s.key")),
            tls_ca_cert_file: Some(dir.join("ca.crt")),
            ..Config::default()
        };
        let ctx = Arc::new(build(&cfg).unwrap());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c1 = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _c2 = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (plain, _) = l.accept().unwrap();
        let (tls, _) = l.accept().unwrap();
        let plain = super::super::conn::Stream::Tcp(mio::net::TcpStream::from_std(plain));
        assert!(plain.direct_reply().is_some());
        let tls = TlsStream::new(mio::net::TcpStream::from_std(tls), ctx).unwrap();
        let tls = super::super::conn::Stream::Tls(Box::new(tls));
        assert!(tls.direct_reply().is_none());
    }

    /// Both ends of the stream contract over a real loopback socket with
    /// small buffers: a 4 MiB message goes one way in pieces (every
    /// `WouldBlock` retried with the same bytes), the reply comes back, and
    /// the client side (for replication) verifies the server.
    #[test]
    fn streams_carry_big_messages_both_ways_non_blocking() {
        let dir = pki();
        let cfg = Config {
            tls_port: 1,
            tls_cert_file: Some(dir.join("s.crt")),
            tls_key_file: Some(dir.join("s.key")),
            tls_ca_cert_file: Some(dir.join("ca.crt")),
            tls_auth_clients: TlsAuthClients::Optional,
            ..Config::default()
        };
        let server_ctx = Arc::new(build(&cfg).unwrap());
        let client_ctx = client_config(&cfg).unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut srv = TlsStream::new(mio::net::TcpStream::from_std(s), server_ctx).unwrap();
        let mut cli =
            TlsStream::client(mio::net::TcpStream::from_std(c), client_ctx, "127.0.0.1").unwrap();
        let msg: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
        let (mut sent, mut got, mut blocked) = (0, Vec::new(), 0);
        let mut buf = vec![0u8; 10_000];
        for _ in 0..1_000_000 {
            if got.len() == msg.len() {
                break;
            }
            if sent < msg.len() {
                match cli.write(&msg[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        blocked += usize::from(!cli.conn.is_handshaking());
                    }
                    Err(e) => panic!("client write: {e}"),
                }
            }
            // The client must read too: it drives its handshake.
            match cli.read(&mut buf) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("client read: {e}"),
            }
            // The server reads only once the client found the socket full,
            // so the retry path runs.
            if blocked == 0 && !srv.conn.is_handshaking() {
                continue;
            }
            match srv.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("server read: {e}"),
            }
            srv.push().unwrap();
        }
        assert!(blocked > 0, "the socket never filled");
        assert!(
            got == msg,
            "{} of {} bytes arrived intact",
            got.len(),
            msg.len()
        );
        // And back.
        let reply = b"+OK\r\n";
        let mut done = 0;
        let mut back = Vec::new();
        for _ in 0..100_000 {
            if back.len() == reply.len() {
                break;
            }
            if done < reply.len() {
                if let Ok(n) = srv.write(&reply[done..]) {
                    done += n;
                }
            }
            if let Ok(n) = cli.read(&mut buf) {
                back.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(back, reply);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Encrypts the PKCS#8 key in `plain` (PEM) with `pass` as OpenSSL 3
    /// does for `openssl rsa -aes256` (PBES2, PBKDF2-SHA256, AES-256-CBC).
    fn encrypt_key(plain: &Path, out: &Path, pass: &[u8]) {
        use pkcs8::der::{Decode, EncodePem};
        let pem = std::fs::read_to_string(plain).unwrap();
        let (_, doc) = pkcs8::SecretDocument::from_pem(&pem).unwrap();
        let info = pkcs8::PrivateKeyInfo::from_der(doc.as_bytes()).unwrap();
        let params =
            pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, b"saltsalt", &[7; 16])
                .unwrap();
        let enc = info.encrypt_with_params(params, pass).unwrap();
        let enc = pkcs8::EncryptedPrivateKeyInfo::from_der(enc.as_bytes()).unwrap();
        std::fs::write(out, enc.to_pem(pkcs8::LineEnding::LF).unwrap()).unwrap();
    }

    #[test]
    fn encrypted_keys_need_tls_key_file_pass() {
        let dir = pki();
        let enc = dir.join("enc.key");
        encrypt_key(&dir.join("s.key"), &enc, b"1234");
        let mut cfg = Config {
            tls_port: 1,
            tls_cert_file: Some(dir.join("s.crt")),
            tls_key_file: Some(enc.clone()),
            tls_ca_cert_file: Some(dir.join("ca.crt")),
            ..Config::default()
        };
        let fail = |why: &str| format!("Failed to load private key: {}: {why}", enc.display());
        assert_eq!(
            build(&cfg).unwrap_err(),
            fail("the private key is encrypted and tls-key-file-pass is not set")
        );
        cfg.tls_key_file_pass = Some(b"4321".to_vec());
        assert_eq!(build(&cfg).unwrap_err(), fail("bad decrypt"));
        cfg.tls_key_file_pass = Some(b"1234".to_vec());
        assert!(build(&cfg).is_ok());
        // The client side (replication) uses the same key and pass.
        assert!(client_config(&cfg).is_ok());
        // A plain key with a pass set loads (OpenSSL ignores the pass too).
        cfg.tls_key_file = Some(dir.join("s.key"));
        assert!(build(&cfg).is_ok());
        // OpenSSL's legacy encrypted PEM is refused with a way out.
        let legacy = dir.join("legacy.key");
        std::fs::write(
            &legacy,
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\
             DEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        cfg.tls_key_file = Some(legacy);
        assert!(build(&cfg).unwrap_err().contains("openssl pkcs8 -topk8"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn protocols_follow_redis_words() {
        assert_eq!(protocols(None).unwrap().len(), 2);
        assert_eq!(protocols(Some(b"TLSv1.2 tlsv1.3")).unwrap().len(), 2);
        assert_eq!(
            protocols(Some(b"TLSv1.3")).unwrap()[0].version,
            rustls::ProtocolVersion::TLSv1_3
        );
        assert_eq!(
            protocols(Some(b"TLSv1.4")).unwrap_err(),
            "Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', \
             'TLSv1.2' and 'TLSv1.3'."
        );
        assert!(protocols(Some(b"TLSv1.1")).is_err());
        assert_eq!(protocols(Some(b"TLSv1 TLSv1.2")).unwrap().len(), 1);
    }

    #[test]
    fn cipher_lists() {
        let mut cfg = Config::default();
        assert_eq!(cipher_suites(&cfg).unwrap().len(), 9);
        cfg.tls_ciphers = Some(b"BOGUS".to_vec());
        assert_eq!(
            cipher_suites(&cfg).unwrap_err(),
            "Failed to configure ciphers: BOGUS"
        );
        cfg.tls_ciphers = Some(b"ECDHE-RSA-AES128-GCM-SHA256:BOGUS:!aNULL".to_vec());
        assert_eq!(cipher_suites(&cfg).unwrap().len(), 4);
        cfg.tls_ciphers = Some(b"DEFAULT:!MEDIUM".to_vec());
        assert_eq!(cipher_suites(&cfg).unwrap().len(), 9);
        cfg.tls_ciphersuites = Some(b"TLS_CHACHA20_POLY1305_SHA256".to_vec());
        assert_eq!(cipher_suites(&cfg).unwrap().len(), 7);
        cfg.tls_ciphersuites = Some(b"BOGUS".to_vec());
        assert_eq!(
            cipher_suites(&cfg).unwrap_err(),
            "Failed to configure ciphersuites: BOGUS"
        );
    }

    #[test]
    fn context_checks_in_redis_order() {
        let mut cfg = Config {
            tls_port: 1,
            ..Config::default()
        };
        assert_eq!(build(&cfg).unwrap_err(), "No tls-cert-file configured!");
        cfg.tls_cert_file = Some("/nope".into());
        assert_eq!(build(&cfg).unwrap_err(), "No tls-key-file configured!");
        cfg.tls_key_file = Some("/nope.key".into());
        assert!(build(&cfg)
            .unwrap_err()
            .starts_with("Either tls-ca-cert-file"));
        cfg.tls_auth_clients = TlsAuthClients::No;
        assert_eq!(
            build(&cfg).unwrap_err(),
            "Failed to load certificate: /nope: No such file or directory"
        );
        cfg.tls_protocols = Some(b"SSLv3".to_vec());
        assert!(build(&cfg)
            .unwrap_err()
            .starts_with("Invalid tls-protocols"));
    }
}
