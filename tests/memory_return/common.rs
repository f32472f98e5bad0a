//! `mod common;` of `tests/memory_return.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
