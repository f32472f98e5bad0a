//! `mod common;` of `tests/transactions.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
