//! `mod common;` of `tests/aof_write_errors.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
