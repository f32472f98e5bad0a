//! `mod common;` of `tests/migrate.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
