//! Configuration: see `config.rs` (moves here once its author lands it).
#[path = "../../../src/config.rs"]
mod imp;
pub use imp::*;
