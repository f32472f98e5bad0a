//! `mod common;` of `tests/busy_locked.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
