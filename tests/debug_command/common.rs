//! `mod common;` of `tests/debug_command.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
