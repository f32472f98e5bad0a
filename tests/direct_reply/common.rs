//! `mod common;` of `tests/direct_reply.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
