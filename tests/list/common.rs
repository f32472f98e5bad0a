//! `mod common;` of `tests/list.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
