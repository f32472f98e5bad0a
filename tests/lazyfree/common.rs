//! `mod common;` of `tests/lazyfree.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
