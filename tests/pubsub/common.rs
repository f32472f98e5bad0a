//! `mod common;` of `tests/pubsub.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
