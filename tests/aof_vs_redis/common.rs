//! `mod common;` of `tests/aof_vs_redis.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
