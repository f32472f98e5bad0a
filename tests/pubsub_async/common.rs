//! `mod common;` of `tests/pubsub_async.rs`: the harness `tests/suite.rs` declares once (see there).
pub use crate::common::*;
