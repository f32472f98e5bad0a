//! Every integration test in one test binary (`cargo test --test suite`).
//!
//! Each `tests/NAME.rs` is a module here, `NAME`, and stays a file of its
//! own: it was a test binary of its own until session 21, and 74 binaries
//! cost the test build 74 compilations of the harness ([`common`]) and of
//! the `redis` crate's generics, and 74 link steps of a large executable
//! (see tests/README.md for the figures). In one binary the test threads
//! also share the waits of every file.
//!
//! * Run one file's tests: `cargo test --test NAME` builds and runs that
//!   file alone as before (a binary of its own, which `cargo test` does not
//!   build); or, without another build, `cargo test --test suite NAME::`
//!   (a filter matches the whole path: `eviction::per_layout::`, `apart`).
//! * A new test file: add `mod NAME;` below, `tests/NAME/common.rs` (a
//!   copy of any other `tests/*/common.rs`) and its `--test NAME` line in
//!   Cargo.toml; [`every_test_file_is_a_module`] fails until all three
//!   exist, so no file is left out of the run.
//! * Each file keeps its `mod common;`: a module declared in `tests/NAME.rs`
//!   is looked up in `tests/NAME/`, where `common.rs` re-exports the one
//!   harness declared here (one copy of [`common`], one `Layout` type for
//!   every file, one `per_layout!`).

#[macro_use]
mod common;

mod acl;
mod aof;
mod aof_enable_busy;
mod aof_errors;
mod aof_load;
mod aof_rewrite;
mod aof_vs_redis;
mod aof_write_errors;
mod bitmap;
mod blocking;
mod busy_by_call;
mod busy_hub;
mod busy_in_place;
mod busy_locked;
mod busy_own_loop;
mod busy_queued;
mod busy_script;
mod busy_watch;
mod clients;
mod consolidation;
mod debug_command;
mod debug_loadaof;
mod debug_reload;
mod differential;
mod direct_reply;
mod eviction;
mod functions;
mod geo;
mod hash;
mod hll;
mod isolation;
mod lazyfree;
mod list;
mod locks_one_round;
mod memory_return;
mod migrate;
mod multi_exec;
mod notify;
mod ops;
mod output_buffer;
mod persist;
mod protocol;
mod pubsub;
mod pubsub_async;
mod random_differential;
mod random_tx;
mod random_types;
mod rdb;
mod replica_expired;
mod replication_chain;
mod replication_demote;
mod replication_failover;
mod replication_fake_replica;
mod replication_master;
mod replication_replica;
mod replication_tessera;
mod replication_tls;
mod script_caller;
mod script_client;
mod script_clock;
mod script_keyspace;
mod script_stale;
mod script_traces;
mod scripting;
mod scripting_in_place;
mod scripting_lend;
mod scripting_state;
mod scripting_wide;
mod sentinel;
mod server;
mod set;
mod shutdown;
mod sort;
mod stream;
mod tls;
mod tracking;
mod transactions;
mod zset;

/// Every `tests/*.rs` but this one is a module above with its
/// `tests/NAME/common.rs`, and a `cargo test --test NAME` target in
/// Cargo.toml: a file missing here would compile nowhere and its tests would
/// never run.
#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(dir.join("suite.rs")).expect("read tests/suite.rs");
    let manifest = std::fs::read_to_string(dir.join("../Cargo.toml")).expect("read Cargo.toml");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read tests/") {
        let path = entry.expect("tests/ entry").path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        if module == "suite" {
            continue;
        }
        if !root.lines().any(|l| l == format!("mod {module};")) {
            missing.push(format!("`mod {module};` in tests/suite.rs"));
        }
        let target =
            format!("{{ name = \"{module}\", path = \"tests/{module}.rs\", test = false }},");
        if !manifest.lines().any(|l| l.trim() == target) {
            missing.push(format!("`{target}` in Cargo.toml"));
        }
        if !dir.join(module).join("common.rs").is_file() {
            missing.push(format!("tests/{module}/common.rs"));
        }
    }
    assert!(missing.is_empty(), "missing: {}", missing.join(", "));
}
