//! `mod common;` of `tests/aof_load.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
