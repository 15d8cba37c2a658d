//! Redis RESP2/RESP3: request parsing, reply encoding, and the small pure helpers a Redis server
//! needs (integer and float arguments, glob patterns, command names, standard error replies).
//!
//! Behaviour follows Redis 7.0 byte for byte, checked against redis-server 7.0.15; each file names
//! the Redis function it follows and lists any deliberate departure.
//!
//! ```text
//!   socket bytes ──► parse_command(buf, &Limits, &mut Args) ──► Ok(consumed) / Incomplete / Protocol
//!                        │                                             │
//!                        ▼                                             ▼
//!                 Args: (start, len) into buf,              ProtocolError::encode(out),
//!                 or into its own scratch for               then close the connection
//!                 unescaped inline arguments
//!
//!   server reply ──► encode::{bulk, integer, map_len, double, ...}(out, Version, ..) ──► out
//!   client side  ──► encode_command(out, args)   parse_reply(buf) ──► (Reply, consumed)
//! ```
//!
//! | file         | concern                                                          |
//! |--------------|------------------------------------------------------------------|
//! | `limits.rs`  | [`Limits`] and their Redis defaults                              |
//! | `request.rs` | [`parse_command`], [`Args`]: multibulk and inline requests       |
//! | `inline.rs`  | `sdssplitargs` quoting rules for inline requests                 |
//! | `error.rs`   | [`ParseError`], [`ProtocolError`] with Redis's exact replies     |
//! | `encode.rs`  | reply encoders for RESP2 and RESP3, [`encode_command`]           |
//! | `errors.rs`  | Redis's standard error replies                                   |
//! | `reply.rs`   | [`Reply`], [`parse_reply`]                                       |
//! | `number.rs`  | [`parse_i64`], [`parse_f64`], [`format_i64`], [`format_double`]  |
//! | `glob.rs`    | [`glob_match`]                                                   |
//! | `name.rs`    | [`name_eq`], [`lowercase_name`]                                  |
//!
//! The hot path allocates nothing per request: [`Args`] is reused, encoders only grow the
//! caller's output buffer, and numbers are formatted on the stack. [`parse_reply`] allocates the
//! values it returns and is meant for clients.

pub mod encode;
mod error;
pub mod errors;
mod glob;
mod inline;
mod limits;
mod name;
mod number;
mod reply;
mod request;

pub use encode::encode_command;
pub use error::{ParseError, ProtocolError, TooLong};
pub use glob::{glob_match, GLOB_NESTING_MAX};
pub use limits::{
    Limits, ARGS_MAX_DEFAULT, BULK_LEN_MAX_DEFAULT, INLINE_LEN_MAX_DEFAULT,
    UNAUTHENTICATED_ARGS_MAX, UNAUTHENTICATED_BULK_LEN_MAX,
};
pub use name::{lowercase_name, name_eq, COMMAND_NAME_LEN_MAX};
pub use number::{format_double, format_i64, parse_f64, parse_i64, DOUBLE_LEN_MAX, I64_LEN_MAX};
pub use reply::{parse_reply, Reply, ReplyError, REPLY_DEPTH_MAX};
pub use request::{bytes_needed, parse_bulk_header, parse_command, too_long_at, Arg, Args};

/// The protocol version a connection speaks: RESP2 by default, RESP3 after `HELLO 3`. Encoders
/// take it to choose between RESP3 types and their RESP2 downgrades.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    /// RESP2: every connection starts here.
    #[default]
    Resp2,
    /// RESP3, negotiated with `HELLO 3`.
    Resp3,
}
