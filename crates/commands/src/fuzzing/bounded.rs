//! Fuzzing on stable Rust for a bounded time, in `cargo test` (issue 26.6):
//! every target of `fuzz/` runs here too, fed by a small mutator over its
//! kept corpus (`fuzz/seeds/<target>/`, and `fuzz/regressions/<target>/`,
//! the inputs that once failed).
//!
//! cargo-fuzz (nightly, libFuzzer's coverage feedback) finds deeper bugs;
//! this catches the shallow ones in every CI run, with no new toolchain.
//! The mutator is libFuzzer's classic set without coverage: bit flips,
//! interesting bytes, inserts, deletes, duplicated ranges, splices with
//! another corpus entry and tokens from the target's dictionary.
//!
//! Budget: `TESSERA_FUZZ_MS` milliseconds per target (default 1500; CI runs
//! the default), a new random seed per run unless `TESSERA_FUZZ_SEED` fixes
//! it. A failing input is written to `fuzz/regressions/<target>/` (so the
//! replay test keeps failing until it is fixed) and the panic names it and
//! the seed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every file of `fuzz/<dir>/<target>/`, sorted by name.
pub fn corpus(dir: &str, target: &str) -> Vec<Vec<u8>> {
    let Ok(rd) = std::fs::read_dir(fuzz_dir().join(dir).join(target)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// A mutator over a corpus (see the module docs).
pub struct Mutator {
    rng: StdRng,
    dict: Vec<Vec<u8>>,
    max_len: usize,
}

const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xfe, 0xff, b'\r', b'\n', b' ', b'"', b'\'', b'\\', b'*', b'$', b'(', b')',
    b'~', b'%', b'&', b'+', b'-', b'@', b'#', b'>', b'<', b'|', b'0', b'9',
];

impl Mutator {
    pub fn new(seed: u64, dict: Vec<Vec<u8>>, max_len: usize) -> Mutator {
        Mutator {
            rng: StdRng::seed_from_u64(seed),
            dict,
            max_len,
        }
    }

    /// A new input: one corpus entry, mutated 1 to 8 times.
    pub fn next(&mut self, corpus: &[Vec<u8>]) -> Vec<u8> {
        let mut v = if corpus.is_empty() {
            Vec::new()
        } else {
            corpus[self.rng.gen_range(0..corpus.len())].clone()
        };
        for _ in 0..self.rng.gen_range(1..=8) {
            self.mutate(&mut v, corpus);
        }
        v.truncate(self.max_len);
        v
    }

    fn pos(&mut self, v: &[u8]) -> usize {
        self.rng.gen_range(0..=v.len())
    }

    fn mutate(&mut self, v: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        match self.rng.gen_range(0..9) {
            0 if !v.is_empty() => {
                let i = self.rng.gen_range(0..v.len());
                v[i] ^= 1 << self.rng.gen_range(0..8);
            }
            1 if !v.is_empty() => {
                let i = self.rng.gen_range(0..v.len());
                v[i] = INTERESTING[self.rng.gen_range(0..INTERESTING.len())];
            }
            2 if !v.is_empty() => {
                let i = self.rng.gen_range(0..v.len());
                v[i] = self.rng.gen();
            }
            3 => {
                let at = self.pos(v);
                let n = self.rng.gen_range(1..=8);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.gen()).collect();
                v.splice(at..at, bytes);
            }
            4 if !v.is_empty() => {
                let a = self.rng.gen_range(0..v.len());
                let b = (a + self.rng.gen_range(1..=16)).min(v.len());
                v.drain(a..b);
            }
            5 if !v.is_empty() => {
                let a = self.rng.gen_range(0..v.len());
                let b = (a + self.rng.gen_range(1..=32)).min(v.len());
                let piece = v[a..b].to_vec();
                let at = self.pos(v);
                v.splice(at..at, piece);
            }
            6 if !corpus.is_empty() => {
                let other = &corpus[self.rng.gen_range(0..corpus.len())];
                if !other.is_empty() {
                    let a = self.rng.gen_range(0..other.len());
                    let b = (a + self.rng.gen_range(1..=64)).min(other.len());
                    let at = self.pos(v);
                    v.splice(at..at, other[a..b].iter().copied());
                }
            }
            7 if !self.dict.is_empty() => {
                let t = self.dict[self.rng.gen_range(0..self.dict.len())].clone();
                let at = self.pos(v);
                v.splice(at..at, t);
            }
            _ => {
                // A number somewhere: boundaries break parsers.
                let n = [
                    "0",
                    "-1",
                    "1",
                    "63",
                    "64",
                    "65535",
                    "2147483647",
                    "4294967296",
                    "9223372036854775807",
                    "-9223372036854775808",
                    "18446744073709551616",
                ];
                let t = n[self.rng.gen_range(0..n.len())].as_bytes().to_vec();
                let at = self.pos(v);
                v.splice(at..at, t);
            }
        }
    }
}

/// Runs `target` on mutated corpus entries for the budget (see the module
/// docs); returns how many inputs ran.
pub fn run(name: &str, dict: &[&str], max_len: usize, target: fn(&[u8]) -> bool) -> usize {
    let budget = std::env::var("TESSERA_FUZZ_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500u64);
    let seed = std::env::var("TESSERA_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let mut inputs = corpus("seeds", name);
    inputs.extend(corpus("regressions", name));
    assert!(!inputs.is_empty(), "no corpus for {name}");
    let dict = dict.iter().map(|t| t.as_bytes().to_vec()).collect();
    let mut m = Mutator::new(seed, dict, max_len);
    let end = Instant::now() + Duration::from_millis(budget);
    let mut n = 0;
    // The corpus itself first (regressions must stay fixed), then
    // mutations of it until the budget is spent.
    while n < inputs.len() || Instant::now() < end {
        let input = if n < inputs.len() {
            inputs[n].clone()
        } else {
            m.next(&inputs)
        };
        let outcome = std::panic::catch_unwind(|| target(&input));
        if let Err(e) = outcome {
            let dir = fuzz_dir().join("regressions").join(name);
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("bounded-{seed:016x}-{n}"));
            let _ = std::fs::write(&file, &input);
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "{name}: input {n} of TESSERA_FUZZ_SEED={seed} failed (kept in {}): {why}",
                file.display()
            );
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESP: &[&str] = &[
        "*",
        "$",
        "\r\n",
        "*1\r\n",
        "$3\r\nGET\r\n",
        "*-1\r\n",
        "$-1\r\n",
        "*0\r\n",
        "\"",
        "'",
        "\\x00",
        "PING",
        "SET",
    ];
    const ACL: &[&str] = &[
        "on",
        "off",
        "nopass",
        "resetpass",
        ">",
        "<",
        "#",
        "!",
        "~",
        "%R~",
        "%W~",
        "%RW~",
        "allkeys",
        "resetkeys",
        "&",
        "allchannels",
        "resetchannels",
        "+",
        "-",
        "+@",
        "-@",
        "@all",
        "@read",
        "@write",
        "|",
        "allcommands",
        "nocommands",
        "reset",
        "(",
        ")",
        "clearselectors",
        "*",
        "get",
        "set",
        "config|get",
        "client|",
        "select|0",
    ];
    const CONF: &[&str] = &[
        "\n",
        " ",
        "\"",
        "'",
        "\\x",
        "port",
        "save",
        "bind",
        "maxmemory",
        "1gb",
        "yes",
        "no",
        "client-output-buffer-limit",
        "normal",
        "replica",
        "pubsub",
        "notify-keyspace-events",
        "KEA",
        "hz",
        "dir",
        "dbfilename",
        "user",
        "rename-command",
        "include",
        "appendfsync",
        "everysec",
        "latency-tracking-info-percentiles",
        "maxmemory-policy",
        "allkeys-lru",
        "oom-score-adj-values",
        "list-max-listpack-size",
        "-2",
        "replicaof",
        "requirepass",
    ];

    #[test]
    fn the_mutator_is_deterministic_and_bounded() {
        let corpus = vec![b"hello world".to_vec(), b"*1\r\n$4\r\nPING\r\n".to_vec()];
        let mut a = Mutator::new(7, vec![b"tok".to_vec()], 32);
        let mut b = Mutator::new(7, vec![b"tok".to_vec()], 32);
        for _ in 0..1000 {
            let x = a.next(&corpus);
            assert_eq!(x, b.next(&corpus));
            assert!(x.len() <= 32);
        }
    }

    #[test]
    fn fuzz_parse_request() {
        assert!(run("parse_request", RESP, 4096, crate::fuzzing::parse_request) > 0);
    }

    #[test]
    fn fuzz_acl_rules() {
        assert!(run("acl_rules", ACL, 1024, crate::fuzzing::acl_rules) > 0);
    }

    #[test]
    fn fuzz_config_text() {
        assert!(run("config_text", CONF, 2048, crate::fuzzing::config_text) > 0);
    }

    #[test]
    fn fuzz_restore_stream() {
        assert!(run("restore_stream", &[], 8192, crate::fuzzing::restore_stream) > 0);
    }

    #[test]
    fn fuzz_restore_hll() {
        assert!(run("restore_hll", &["HYLL"], 13000, crate::fuzzing::restore_hll) > 0);
    }

    #[test]
    fn fuzz_bitgeo() {
        assert!(run("bitgeo", &[], 8192, crate::fuzzing::bitgeo) > 0);
    }
}
