//! RESP2/RESP3 wire protocol: request parsing and reply encoding.
//!
//! This crate knows bytes only: no sockets, no data, no commands. It is on
//! the request path of every command, so:
//!
//! * parsing never allocates: a request's arguments are returned as ranges
//!   into the connection's own read buffer ([`parse_request`]); inline
//!   requests are unescaped in place (an unescaped argument is never longer
//!   than its quoted form, so it fits where it was read);
//! * encoding appends to one growing `Vec<u8>` per connection ([`Reply`]),
//!   written to the socket once per batch; numbers are formatted with `itoa`
//!   and never through `to_string()`.
//!
//! Limits follow Redis 7's `networking.c`: every error has Redis's exact
//! text (see [`ProtoError`]), and after one the connection must be closed.

mod parse;
mod reply;

pub use ds::num::format_double;
pub use parse::{
    parse_request, string2ll, Args, Limits, OwnedArgs, Parsed, ProtoError, INLINE_MAX_SIZE,
};
pub use reply::Reply;
