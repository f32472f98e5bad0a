//! `mod common;` of `tests/aof_enable_busy.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
